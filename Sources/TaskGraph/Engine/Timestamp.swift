#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Wall-clock time in milliseconds since the Unix epoch, as recorded on jobs, nodes and events.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    /// The current time.
    public static func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Timestamp(milliseconds: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.milliseconds < rhs.milliseconds }

    /// Reads an RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS`, an optional fraction (kept to the
    /// millisecond, truncated), then `Z` or an offset `±HH:MM`; `T` and `Z` in either case. Nil for
    /// anything else, an impossible date or time included. A leap second (`:60`) is refused: no
    /// clock here counts one.
    public init?(rfc3339 text: String) {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 20, utf8.count <= 40 else { return nil }
        func digits(_ start: Int, _ count: Int) -> Int64? {
            var value: Int64 = 0
            for index in start..<start + count {
                guard index < utf8.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(utf8[index]) else {
                    return nil
                }
                value = value * 10 + Int64(utf8[index] - UInt8(ascii: "0"))
            }
            return value
        }
        func byte(_ index: Int) -> UInt8 { index < utf8.count ? utf8[index] : 0 }
        guard let year = digits(0, 4), byte(4) == UInt8(ascii: "-"), let month = digits(5, 2),
            byte(7) == UInt8(ascii: "-"), let day = digits(8, 2), byte(10) | 0x20 == UInt8(ascii: "t"),
            let hour = digits(11, 2), byte(13) == UInt8(ascii: ":"), let minute = digits(14, 2),
            byte(16) == UInt8(ascii: ":"), let second = digits(17, 2)
        else { return nil }
        var index = 19
        var millis: Int64 = 0
        if byte(index) == UInt8(ascii: ".") {
            index += 1
            let start = index
            while let _ = digits(index, 1) { index += 1 }
            guard index > start else { return nil }
            for position in start..<start + 3 {
                millis = millis * 10 + (position < index ? Int64(utf8[position] - UInt8(ascii: "0")) : 0)
            }
        }
        var offsetMinutes: Int64 = 0
        if byte(index) | 0x20 == UInt8(ascii: "z") {
            index += 1
        } else if byte(index) == UInt8(ascii: "+") || byte(index) == UInt8(ascii: "-") {
            guard let offsetHour = digits(index + 1, 2), byte(index + 3) == UInt8(ascii: ":"),
                let offsetMinute = digits(index + 4, 2), offsetHour <= 23, offsetMinute <= 59
            else { return nil }
            offsetMinutes = (offsetHour * 60 + offsetMinute) * (byte(index) == UInt8(ascii: "-") ? -1 : 1)
            index += 6
        } else {
            return nil
        }
        guard index == utf8.count else { return nil }
        let isLeap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays: [Int64] = [31, isLeap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...12).contains(month), (1...monthDays[Int(month) - 1]).contains(day), hour <= 23, minute <= 59,
            second <= 59
        else { return nil }
        // Howard Hinnant's days_from_civil.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60
        self.init(milliseconds: seconds * 1000 + millis)
    }

    /// RFC 3339, UTC, with milliseconds: `2026-11-21T23:42:57.123Z`.
    public var rfc3339: String {
        String(unsafeUninitializedCapacity: Self.rfc3339Length) { buffer in
            self.formatRFC3339(into: UnsafeMutableRawBufferPointer(buffer))
            return Self.rfc3339Length
        }
    }

    /// Appends `rfc3339` to `out` without making a `String` first.
    public func appendRFC3339(to out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(byteCount: Self.rfc3339Length, alignment: 1) { buffer in
            self.formatRFC3339(into: buffer)
            out.append(contentsOf: buffer)
        }
    }

    /// The length of `rfc3339` (years 0–9999).
    static let rfc3339Length = 24

    /// Formats `rfc3339` into the first 24 bytes of `buffer`.
    ///
    /// By hand (days-from-civil arithmetic) and with no allocation: Foundation's formatters cost
    /// microseconds per call, and every job and event representation carries several timestamps.
    private func formatRFC3339(into buffer: UnsafeMutableRawBufferPointer) {
        let ms = self.milliseconds
        var days = ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000
        var rest = ms - days * 86_400_000
        let hour = rest / 3_600_000
        rest %= 3_600_000
        let minute = rest / 60_000
        rest %= 60_000
        let second = rest / 1000
        let milli = rest % 1000
        // Howard Hinnant's civil_from_days.
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let doe = days - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        var year = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        if month <= 2 { year += 1 }
        // Digits of `value` (its last `width` of them) ending just before `end`.
        func put(_ value: Int64, _ width: Int, endingAt end: Int) {
            var v = value
            for i in stride(from: end - 1, through: end - width, by: -1) {
                buffer[i] = 0x30 + UInt8(truncatingIfNeeded: v % 10)
                v /= 10
            }
        }
        put(year, 4, endingAt: 4)
        buffer[4] = 0x2D  // -
        put(month, 2, endingAt: 7)
        buffer[7] = 0x2D
        put(day, 2, endingAt: 10)
        buffer[10] = 0x54  // T
        put(hour, 2, endingAt: 13)
        buffer[13] = 0x3A  // :
        put(minute, 2, endingAt: 16)
        buffer[16] = 0x3A
        put(second, 2, endingAt: 19)
        buffer[19] = 0x2E  // .
        put(milli, 3, endingAt: 23)
        buffer[23] = 0x5A  // Z
    }

    public var description: String { self.rfc3339 }
}
