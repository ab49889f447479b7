import CCrypto
import Synchronization
import TaskCore

/// Lease ids (SPEC §6): `lease_` and 32 hexadecimal digits, 128 bits from the CSPRNG. A lease id is
/// a capability — it lets its holder complete one attempt — so it never appears in a log line, a
/// list response or an error message, and the store keeps only its `hash`.
enum LeaseID {
    private static let random = Mutex(RandomBytes())
    private static let hex = Array("0123456789abcdef".utf8)
    /// The HMAC key of `hash`: a fixed domain separator (the hash only has to be one-way).
    private static let hashKey = Array("taskserver lease id".utf8)

    static func make() -> String {
        let (a, b) = Self.random.withLock { random -> ((UInt64, UInt16), (UInt64, UInt16)) in
            (random.next(), random.next())
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        for shift in stride(from: 56, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: a.0 >> UInt64(shift)))
        }
        for shift in stride(from: 56, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: b.0 >> UInt64(shift)))
        }
        return "lease_" + Self.hexString(bytes)
    }

    /// Whether `id` has the shape of a lease id (saves a lookup, and a hash, for garbage).
    static func isPlausible(_ id: String) -> Bool {
        let utf8 = id.utf8
        return utf8.count == 38 && id.hasPrefix("lease_")
            && utf8.dropFirst(6).allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The one-way hash the store keeps instead of the id: HMAC-SHA256 in hexadecimal.
    static func hash(_ id: String) -> String {
        var out = [UInt8](repeating: 0, count: 32)
        let data = Array(id.utf8)
        _ = Self.hashKey.withUnsafeBufferPointer { key in
            data.withUnsafeBufferPointer { data in
                out.withUnsafeMutableBufferPointer { out in
                    ts_hmac_sha256(key.baseAddress, Int32(key.count), data.baseAddress, data.count, out.baseAddress)
                }
            }
        }
        return Self.hexString(out)
    }

    private static func hexString(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            for (index, byte) in bytes.enumerated() {
                out[2 * index] = Self.hex[Int(byte >> 4)]
                out[2 * index + 1] = Self.hex[Int(byte & 15)]
            }
            return bytes.count * 2
        }
    }
}
