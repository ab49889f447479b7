/// A job id as a dictionary key: up to 31 bytes (every id this server issues has 26) held inline
/// with their count, so that hashing and comparing keys never reads a string's storage. With
/// 100,000 jobs held that storage is cold: every insert and eviction paid cache misses for the
/// keys it probed or moved. Longer ids stay strings.
enum JobIDKey: Hashable, Sendable {
    case inline(UInt64, UInt64, UInt64, UInt64)
    case other(String)

    init(_ id: String) {
        var id = id
        let count = id.utf8.count
        guard count < 32 else {
            self = .other(id)
            return
        }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { raw in
            id.withUTF8 { bytes in raw.copyMemory(from: UnsafeRawBufferPointer(bytes)) }
            raw[31] = UInt8(count)
        }
        self = .inline(words.0, words.1, words.2, words.3)
    }
}
