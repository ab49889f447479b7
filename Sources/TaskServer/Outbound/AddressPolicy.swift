#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An IPv4 or IPv6 network in CIDR notation (`169.254.0.0/16`, `fe80::/10`, `10.1.2.3`).
public struct CIDR: Sendable, Hashable, CustomStringConvertible {
    /// The network address: 4 bytes (IPv4) or 16 (IPv6), host bits cleared.
    public let address: [UInt8]
    /// The number of leading bits that must match.
    public let prefixLength: Int

    /// Parses `address/prefix` or a bare address (a single host); nil when malformed.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let bytes = IPAddress.parse(String(parts[0])) else { return nil }
        let bits = bytes.count * 8
        var length = bits
        if parts.count == 2 {
            guard !parts[1].isEmpty, parts[1].utf8.count <= 3, parts[1].utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                let parsed = Int(parts[1]), parsed <= bits
            else { return nil }
            length = parsed
        }
        self.init(address: bytes, prefixLength: length)
    }

    init(address: [UInt8], prefixLength: Int) {
        var masked = address
        for index in masked.indices {
            let keep = max(0, min(8, prefixLength - index * 8))
            masked[index] &= keep == 0 ? 0 : ~UInt8(0) << (8 - keep)
        }
        self.address = masked
        self.prefixLength = prefixLength
    }

    /// Whether `address` (4 or 16 bytes) lies in this network.
    public func contains(_ address: [UInt8]) -> Bool {
        guard address.count == self.address.count else { return false }
        var remaining = self.prefixLength
        var index = 0
        while remaining > 0 {
            let bits = min(8, remaining)
            let mask: UInt8 = ~UInt8(0) << (8 - bits)
            if address[index] & mask != self.address[index] { return false }
            remaining -= bits
            index += 1
        }
        return true
    }

    public var description: String { "\(IPAddress.format(self.address))/\(self.prefixLength)" }
}

/// Which addresses outbound requests (the `http` action, webhooks) may connect to.
///
/// The rule, checked on every address libcurl is about to connect to (after DNS, so a name that
/// resolves to a forbidden address is refused too):
/// 1. The **most specific** matching range decides (longest prefix, as in a routing table).
/// 2. Among ranges of equal length, `--outbound-deny` beats `--outbound-allow`, and both beat the
///    built-in list.
/// 3. An address no range matches is allowed.
///
/// The built-in list denies link-local and cloud-metadata addresses (`defaultDenied`). So
/// `--outbound-deny 127.0.0.2/32` refuses one loopback address, `--outbound-allow 169.254.0.0/16`
/// re-opens link-local, and `--outbound-deny 0.0.0.0/0 --outbound-deny ::/0 --outbound-allow
/// 127.0.0.0/8` turns the policy into an allow-list of loopback. IPv4-mapped (`::ffff:a.b.c.d`)
/// and NAT64 (`64:ff9b::a.b.c.d`) IPv6 addresses are judged as the IPv4 address they carry.
public struct AddressPolicy: Sendable, Equatable {
    /// Link-local and cloud-metadata ranges, denied unless a more specific allow re-opens them.
    public static let defaultDenied: [CIDR] = [
        "169.254.0.0/16",  // IPv4 link-local, including 169.254.169.254 (AWS, GCP, Azure, OpenStack metadata)
        "fe80::/10",  // IPv6 link-local
        "100.100.100.200/32",  // Alibaba Cloud metadata
        "fd00:ec2::254/128",  // AWS metadata over IPv6
        "168.63.129.16/32",  // Azure platform (WireServer)
        "192.0.0.192/32",  // Oracle Cloud metadata
    ].map { CIDR($0)! }

    /// Every address allowed, link-local and metadata included: for a client that talks only to
    /// a server its operator named (`taskserver worker` to its own server, usually on loopback or
    /// a private network), never to URLs that jobs supply. Each built-in range is re-opened by an
    /// allow of the same length, which beats it (rule 2).
    public static let unrestricted = AddressPolicy(allow: Self.defaultDenied)

    public var allow: [CIDR]
    public var deny: [CIDR]

    public init(allow: [CIDR] = [], deny: [CIDR] = []) {
        self.allow = allow
        self.deny = deny
    }

    /// The outcome of checking one address.
    public enum Decision: Sendable, Equatable {
        case allowed
        /// Refused, naming the rule that refused it (`built-in rule 169.254.0.0/16`).
        case denied(rule: String)
    }

    /// Whether `address` (4 or 16 bytes) may be connected to.
    public func decision(for address: [UInt8]) -> Decision {
        let address = IPAddress.embeddedIPv4(address) ?? address
        // (prefix length, rank, denies, rule): the highest prefix wins, then the highest rank.
        var best: (length: Int, rank: Int, denies: Bool, rule: CIDR)?
        func consider(_ ranges: [CIDR], rank: Int, denies: Bool) {
            for range in ranges where range.contains(address) {
                if let current = best, (current.length, current.rank) >= (range.prefixLength, rank) { continue }
                best = (range.prefixLength, rank, denies, range)
            }
        }
        consider(Self.defaultDenied, rank: 0, denies: true)
        consider(self.allow, rank: 1, denies: false)
        consider(self.deny, rank: 2, denies: true)
        guard let best, best.denies else { return .allowed }
        return .denied(rule: best.rank == 0 ? "built-in rule \(best.rule)" : "--outbound-deny \(best.rule)")
    }
}

/// Parsing and printing of raw IP addresses.
enum IPAddress {
    /// The 4 or 16 bytes of a textual IPv4 or IPv6 address (no zone, no brackets).
    static func parse(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }

    /// The conventional text of 4 or 16 address bytes.
    static func format(_ bytes: [UInt8]) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        let ok = bytes.withUnsafeBytes { raw in
            inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count)) != nil
        }
        guard ok else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The IPv4 address carried by an IPv4-mapped (`::ffff:0:0/96`) or NAT64 (`64:ff9b::/96`) IPv6 address.
    static func embeddedIPv4(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count == 16 else { return nil }
        let mapped = bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        let nat64 =
            bytes[0] == 0x00 && bytes[1] == 0x64 && bytes[2] == 0xFF && bytes[3] == 0x9B
            && bytes[4..<12].allSatisfy { $0 == 0 }
        return mapped || nat64 ? Array(bytes[12..<16]) : nil
    }
}
