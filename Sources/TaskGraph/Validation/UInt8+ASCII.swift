extension UInt8 {
    /// The byte with an ASCII capital letter made lowercase, any other byte as it is: the one ASCII
    /// case rule of TaskGraph's field suggestions and TaskServer's header names, URL schemes and
    /// hosts (`lowercased()` would also fold non-ASCII letters, which HTTP does not).
    @inlinable
    package var lowercasedASCII: UInt8 {
        self >= UInt8(ascii: "A") && self <= UInt8(ascii: "Z") ? self + 0x20 : self
    }
}
