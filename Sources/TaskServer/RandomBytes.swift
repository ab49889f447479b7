import CCrypto

/// Bytes from OpenSSL's CSPRNG (libcrypto, linked for HMAC already), drawn 4 KiB at a time:
/// `RAND_bytes` checks the process id with a system call on every call, and
/// `SystemRandomNumberGenerator` makes one `getrandom` call per number (each ~1–2% of a
/// submission's CPU when made per id).
struct RandomBytes {
    private var buffer = [UInt8](repeating: 0, count: 4096)
    private var offset = 4096

    /// 80 random bits.
    mutating func next() -> (UInt64, UInt16) {
        if self.offset + 10 > self.buffer.count {
            let filled = self.buffer.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress!, Int32($0.count)) }
            if filled != 1 {
                var generator = SystemRandomNumberGenerator()
                for index in self.buffer.indices {
                    self.buffer[index] = UInt8(truncatingIfNeeded: generator.next())
                }
            }
            self.offset = 0
        }
        defer { self.offset += 10 }
        return self.buffer.withUnsafeBytes { raw in
            (
                raw.loadUnaligned(fromByteOffset: self.offset, as: UInt64.self),
                raw.loadUnaligned(fromByteOffset: self.offset + 8, as: UInt16.self)
            )
        }
    }
}
