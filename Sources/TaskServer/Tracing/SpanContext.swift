import Synchronization

/// A span's place in a trace, as W3C Trace Context carries it (`traceparent`, `tracestate`).
///
/// Parsed as the Trace Context recommendation says a receiver must (level 1, §3.2 and §4.3): a
/// malformed `traceparent` — a version of `ff`, a length that does not fit the version, upper-case
/// hex, an all-zero trace or span id — is ignored, never refused: the request then starts a trace
/// of its own. A `tracestate` that does not parse is dropped (the `traceparent` is kept); one over
/// the limits is truncated by the spec's rule: members over 128 characters go first, then members
/// from the end, until at most 32 members and 512 characters are left.
///
/// (swift-w3c-trace-context parses only version `00`, throws for the whole context when the
/// `tracestate` is bad, and does not truncate; these ~150 lines do what the spec asks.)
public struct SpanContext: Sendable, Hashable {
    /// The trace id: 16 bytes, never all zero.
    public var traceID: TraceID
    /// The span's id: 8 bytes, never zero.
    public var spanID: UInt64
    /// Whether the trace is sampled (flag bit 0): spans of an unsampled trace are not recorded.
    public var sampled: Bool
    /// The vendors' `tracestate`, already within the spec's limits; nil when there is none.
    public var traceState: String?

    public init(traceID: TraceID, spanID: UInt64, sampled: Bool, traceState: String? = nil) {
        self.traceID = traceID
        self.spanID = spanID
        self.sampled = sampled
        self.traceState = traceState
    }

    /// The context of `traceparent` (and `tracestate`), or nil when `traceparent` is malformed.
    public init?(traceparent: String, tracestate: String? = nil) {
        var traceparent = traceparent
        guard let parsed = traceparent.withUTF8({ Self.parse($0, length: $0.count) }) else { return nil }
        self = parsed
        self.traceState = tracestate.flatMap(Self.validTraceState)
    }

    /// The `traceparent` whose `length` bytes start `bytes` (without allocating: a job's context is
    /// read back from its label at every attempt).
    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, length: Int) -> SpanContext? {
        guard length >= 55, bytes.count >= length, let version = Hex.byte(bytes[0], bytes[1]), version != 0xff else {
            return nil
        }
        // Version 00 is exactly 55 characters; a later version may add fields after a dash.
        if version == 0 ? length != 55 : (length > 55 && bytes[55] != UInt8(ascii: "-")) { return nil }
        let dash = UInt8(ascii: "-")
        guard bytes[2] == dash, bytes[35] == dash, bytes[52] == dash,
            let high = Hex.uint64(bytes, at: 3), let low = Hex.uint64(bytes, at: 19),
            let span = Hex.uint64(bytes, at: 36), let flags = Hex.byte(bytes[53], bytes[54]),
            high != 0 || low != 0, span != 0
        else { return nil }
        return SpanContext(traceID: TraceID(high: high, low: low), spanID: span, sampled: flags & 1 == 1)
    }

    /// `00-<trace id>-<span id>-<flags>`.
    public var traceparent: String {
        String(unsafeUninitializedCapacity: 55) { buffer in
            self.write(into: buffer)
            return 55
        }
    }

    /// Writes `traceparent` into the first 55 bytes of `buffer`.
    func write(into buffer: UnsafeMutableBufferPointer<UInt8>) {
        let dash = UInt8(ascii: "-")
        buffer[0] = UInt8(ascii: "0")
        buffer[1] = UInt8(ascii: "0")
        buffer[2] = dash
        Hex.write(self.traceID.high, into: buffer, at: 3)
        Hex.write(self.traceID.low, into: buffer, at: 19)
        buffer[35] = dash
        Hex.write(self.spanID, into: buffer, at: 36)
        buffer[52] = dash
        buffer[53] = UInt8(ascii: "0")
        buffer[54] = self.sampled ? UInt8(ascii: "1") : UInt8(ascii: "0")
    }

    /// The same trace, a new span `spanID` under this one.
    public func child(_ spanID: UInt64) -> SpanContext {
        SpanContext(traceID: self.traceID, spanID: spanID, sampled: self.sampled, traceState: self.traceState)
    }

    // MARK: tracestate

    /// The spec's limits on a `tracestate` that is passed on.
    static let maxTraceStateMembers = 32
    static let maxTraceStateLength = 512
    static let longTraceStateMember = 128

    /// `value` (one header, or several joined with commas) if every member is valid, truncated to
    /// the limits; nil when a member is malformed, a key repeats, or nothing is left.
    static func validTraceState(_ value: String) -> String? {
        var members: [Substring] = []
        var keys = Set<Substring>()
        for part in value.split(separator: ",", omittingEmptySubsequences: false) {
            let member = part.trimmingSpaces
            if member.isEmpty { continue }  // empty members are allowed and dropped
            guard let equals = member.firstIndex(of: "=") else { return nil }
            let key = member[..<equals]
            let memberValue = member[member.index(after: equals)...]
            guard Self.isTraceStateKey(key), Self.isTraceStateValue(memberValue), keys.insert(key).inserted else {
                return nil
            }
            members.append(member)
            // Far over any limit: no need to read the rest (at most 32 members are kept).
            if members.count > 4 * Self.maxTraceStateMembers { break }
        }
        func length(_ list: [Substring]) -> Int { list.reduce(0) { $0 + $1.utf8.count } + max(0, list.count - 1) }
        if members.count > Self.maxTraceStateMembers || length(members) > Self.maxTraceStateLength {
            // Long members go first, from the end; then members from the end.
            var index = members.count - 1
            while index >= 0, members.count > Self.maxTraceStateMembers || length(members) > Self.maxTraceStateLength {
                if members[index].utf8.count > Self.longTraceStateMember { members.remove(at: index) }
                index -= 1
            }
            while members.count > Self.maxTraceStateMembers || length(members) > Self.maxTraceStateLength {
                members.removeLast()
            }
        }
        return members.isEmpty ? nil : members.joined(separator: ",")
    }

    /// `simple-key` (`lcalpha 0*255(lcalpha / DIGIT / "_" / "-"/ "*" / "/")`) or
    /// `tenant@system` (tenant up to 241 characters from a letter or digit, system up to 14).
    private static func isTraceStateKey(_ key: Substring) -> Bool {
        func isKeyByte(_ byte: UInt8) -> Bool {
            (0x61...0x7a).contains(byte) || (0x30...0x39).contains(byte) || byte == 0x5f || byte == 0x2d
                || byte == 0x2a || byte == 0x2f
        }
        let bytes = Array(key.utf8)
        if let at = bytes.firstIndex(of: UInt8(ascii: "@")) {
            let tenant = bytes[..<at]
            let system = bytes[(at + 1)...]
            guard let first = tenant.first, (0x61...0x7a).contains(first) || (0x30...0x39).contains(first),
                tenant.count <= 241, tenant.allSatisfy(isKeyByte),
                let systemFirst = system.first, (0x61...0x7a).contains(systemFirst), system.count <= 14,
                system.allSatisfy(isKeyByte)
            else { return false }
            return true
        }
        guard let first = bytes.first, (0x61...0x7a).contains(first), bytes.count <= 256 else { return false }
        return bytes.allSatisfy(isKeyByte)
    }

    /// `0*255(chr) nblk-chr`: printable ASCII but `,` and `=`, spaces inside only.
    private static func isTraceStateValue(_ value: Substring) -> Bool {
        let bytes = value.utf8
        guard let last = bytes.last, last != 0x20, bytes.count <= 256 else { return false }
        return bytes.allSatisfy { (0x20...0x7e).contains($0) && $0 != 0x2c && $0 != 0x3d }
    }
}

/// A W3C trace id: 16 bytes, as two words.
public struct TraceID: Sendable, Hashable {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// 32 lower-case hex digits.
    public var hex: String { Hex.string(self.high) + Hex.string(self.low) }
}

/// Trace and span ids: SplitMix64 over an atomic counter, from a seed drawn from OpenSSL's CSPRNG
/// at start-up.
///
/// Ids need to be unique and uniformly spread (the ratio sampler reads a trace id's low bits), not
/// secret: OpenTelemetry's SDKs draw them from fast non-cryptographic generators too. A lock around
/// a CSPRNG buffer (as job ids have) was contended by the event loops at three ids per job and
/// cost measurable futex time; an atomic add does not block. SplitMix64 is a bijection of the
/// counter, so a process never repeats an id until 2⁶⁴ of them.
enum TraceIDs {
    private static let seed: UInt64 = {
        var random = RandomBytes()
        return random.next().0
    }()
    private static let counter = Atomic<UInt64>(0)

    /// A span id: 8 bytes, never zero.
    static func spanID() -> UInt64 {
        while true {
            let step = Self.counter.wrappingAdd(1, ordering: .relaxed).newValue
            let word = Self.mix(Self.seed &+ step &* 0x9E37_79B9_7F4A_7C15)
            if word != 0 { return word }
        }
    }

    /// A trace id: 16 bytes, never all zero.
    static func traceID() -> TraceID {
        TraceID(high: Self.spanID(), low: Self.spanID())
    }

    /// SplitMix64's finalizer.
    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Lower-case hexadecimal, strictly (W3C Trace Context allows no upper case).
enum Hex {
    @inline(__always)
    static func value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte &- 0x30
        case 0x61...0x66: byte &- 0x61 &+ 10
        default: nil
        }
    }

    @inline(__always)
    static func digit(_ value: UInt64) -> UInt8 {
        value < 10 ? UInt8(truncatingIfNeeded: value) &+ 0x30 : UInt8(truncatingIfNeeded: value) &+ 0x57
    }

    static func byte(_ high: UInt8, _ low: UInt8) -> UInt8? {
        guard let high = Self.value(high), let low = Self.value(low) else { return nil }
        return high << 4 | low
    }

    /// The sixteen hex digits at `offset` of `bytes` as a word.
    static func uint64(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int) -> UInt64? {
        guard offset + 16 <= bytes.count else { return nil }
        var word: UInt64 = 0
        for index in offset..<(offset + 16) {
            guard let digit = Self.value(bytes[index]) else { return nil }
            word = word << 4 | UInt64(digit)
        }
        return word
    }

    /// Writes a word as sixteen hex digits at `offset` of `buffer`.
    static func write(_ word: UInt64, into buffer: UnsafeMutableBufferPointer<UInt8>, at offset: Int) {
        for index in 0..<16 {
            buffer[offset + index] = Self.digit((word >> UInt64(60 - 4 * index)) & 0xf)
        }
    }

    /// A word as sixteen hex digits.
    static func string(_ word: UInt64) -> String {
        String(unsafeUninitializedCapacity: 16) { buffer in
            Self.write(word, into: buffer, at: 0)
            return 16
        }
    }
}
