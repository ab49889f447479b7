import Foundation

/// A cron expression read on the wall clock of a time zone (SPEC §8), and the instants at which it
/// fires. Time zones and daylight saving follow cronie (the cron of Debian and Fedora):
///
/// - A *wildcard* expression (see ``CronExpression/isFixedTime``) fires at every real whole minute
///   whose local reading matches: local times skipped by a forward jump never fire, and local times
///   that occur twice fire twice.
/// - A *fixed-time* expression fires once for each matching local date and time: a local time
///   skipped by a forward jump fires at the first instant after the gap (02:30 in Paris on the
///   spring-forward day fires at 03:00 CEST), and a local time that occurs twice fires only at its
///   first occurrence.
/// - Fires on the same instant are one fire (on Paris's spring-forward day `0 2,3 * * *` fires
///   once, at 03:00).
///
/// The calendar arithmetic is our own (proleptic Gregorian, days since 1970); the time zone is
/// asked only for its offsets from UTC and the instants at which they change.
public struct CronSchedule: Sendable {
    /// What the schedule fires on.
    public let expression: CronExpression
    /// The zone on whose wall clock the expression is read.
    public let timeZone: TimeZone
    /// The matching times of day, as seconds after local midnight, ascending.
    private let timesOfDay: [Int]

    /// How many local days past the start, and past each fire found, ``nextFires(after:count:)``
    /// searches for the next fire before giving up: 146,097, the 400 years after which the
    /// Gregorian calendar repeats (dates and weekdays alike), so any expression that ever fires is
    /// found. The rarest the language allows come every 28 years or so, with gaps of 40 (a 29
    /// February that is a Sunday: `0 0 29 2 */7`, around 2100, which is not a leap year).
    public static let searchSpanDays = 146_097

    /// The last instant a fire may fall on: 9999-12-31T23:59:59Z, the last one RFC 3339 writes
    /// (four-digit years).
    public static let lastInstant = 253_402_300_799

    /// The schedule of `expression` on the wall clock of `timeZone`.
    public init(_ expression: CronExpression, timeZone: TimeZone) {
        self.expression = expression
        self.timeZone = timeZone
        var times: [Int] = []
        for hour in expression.hours.values {
            for minute in expression.minutes.values {
                times.append(hour * 3600 + minute * 60)
            }
        }
        timesOfDay = times
    }

    /// Parses `text` (``CronExpression/init(parsing:)``) and looks up the zone `timeZoneName`
    /// (``timeZone(named:)``); throws the first problem.
    public init(parsing text: String, timeZoneName: String = "UTC") throws(CronError) {
        self.init(try CronExpression(parsing: text), timeZone: try Self.timeZone(named: timeZoneName))
    }

    /// The first fire strictly after `date`, or nil if there is none within ``searchSpanDays``.
    public func nextFire(after date: Date) -> Date? {
        nextFires(after: date, count: 1).first
    }

    /// The first `count` fires strictly after `date`, ascending and without duplicates, each on a
    /// whole second (a whole minute of local time). Fewer when the search reaches
    /// ``searchSpanDays`` local days after the day of `date` first; none when `count` is not
    /// positive.
    public func nextFires(after date: Date, count: Int) -> [Date] {
        let start = date.timeIntervalSince1970
        guard count > 0, start.isFinite, abs(start) < 1e13 else { return [] }
        // Fires are whole seconds: t > start exactly when t > ⌊start⌋.
        let after = Int(start.rounded(.down))
        guard after < Self.lastInstant else { return [] }
        let firstDay = floorDivide(after, 86_400)
        // The search goes on `searchSpanDays` past the start and past each fire found.
        var lastDay = firstDay + Self.searchSpanDays
        // No zone is a whole day off UTC, so the fires of local day d lie strictly between the UTC
        // instants (d - 1) × 86,400 and (d + 2) × 86,400: the search starts two days early, and
        // once the days before d have been searched, the fires before (d - 1) × 86,400 are final.
        // Past `finalDay` no local day has a fire by `lastInstant`.
        let finalDay = floorDivide(Self.lastInstant, 86_400) + 2
        var found: [Int] = []
        var day = firstDay - 2
        var settled = Int.min
        while day <= min(lastDay, finalDay) {
            let civil = CivilDate(daysSinceEpoch: day)
            let weekday = CivilDate.weekday(daysSinceEpoch: day)
            if expression.matchesDay(month: civil.month, day: civil.day, weekday: weekday) {
                let fires = fires(onLocalDay: day).drop(while: { $0 <= after })
                if let last = fires.last { lastDay = max(lastDay, floorDivide(last, 86_400) + Self.searchSpanDays) }
                Self.merge(fires, into: &found)
            }
            day += 1
            settled = day > finalDay ? Self.lastInstant + 1 : (day - 1) * 86_400
            if found.count >= count && found[count - 1] < settled {
                break
            }
        }
        return found.lazy.filter { $0 < settled }.prefix(count).map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }

    /// The fires of local day `day` (days since 1970-01-01 on the zone's wall clock), ascending
    /// and without duplicates.
    private func fires(onLocalDay day: Int) -> [Int] {
        let midnight = day * 86_400
        let segments = offsetSegments(from: midnight - 2 * 86_400, to: midnight + 3 * 86_400)
        var fires: [Int] = []
        for time in timesOfDay {
            let wall = midnight + time
            // The instants whose local reading is `wall`: none, one, or two (or more) if the zone
            // turns its clocks back over it.
            var earliest: Int?
            for (index, segment) in segments.enumerated() {
                let instant = wall - segment.offset
                let end = index + 1 < segments.count ? segments[index + 1].start : Int.max
                guard instant >= segment.start && instant < end else { continue }
                if expression.isFixedTime {
                    earliest = min(earliest ?? instant, instant)
                } else {
                    fires.append(instant)
                }
            }
            if expression.isFixedTime {
                if let earliest {
                    fires.append(earliest)
                } else if let jump = Self.gapEnd(skipping: wall, segments) {
                    fires.append(jump)
                }
            }
        }
        fires.sort()
        var unique: [Int] = []
        unique.reserveCapacity(fires.count)
        for fire in fires where unique.last != fire {
            unique.append(fire)
        }
        return unique
    }

    /// A span of time with one offset from UTC: from `start` to the next segment's start.
    private struct Segment {
        var start: Int
        var offset: Int
    }

    /// The zone's offsets from the instant `start` to the instant `end` (seconds since 1970).
    private func offsetSegments(from start: Int, to end: Int) -> [Segment] {
        var cursor = Date(timeIntervalSince1970: TimeInterval(start))
        var segments = [Segment(start: start, offset: timeZone.secondsFromGMT(for: cursor))]
        while let next = timeZone.nextDaylightSavingTimeTransition(after: cursor),
            next > cursor, next.timeIntervalSince1970 < TimeInterval(end)
        {
            let instant = Int(next.timeIntervalSince1970.rounded(.up))
            let offset = timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(instant)))
            if offset != segments[segments.count - 1].offset {
                segments.append(Segment(start: instant, offset: offset))
            }
            cursor = next
        }
        return segments
    }

    /// The instant at which a forward jump that skips the local time `wall` ends — the first
    /// instant after the gap — or nil if no jump in `segments` skips it.
    private static func gapEnd(skipping wall: Int, _ segments: [Segment]) -> Int? {
        for index in segments.indices.dropFirst() {
            let jump = segments[index].start
            if jump + segments[index - 1].offset <= wall && wall < jump + segments[index].offset {
                return jump
            }
        }
        return nil
    }

    /// Merges the ascending, duplicate-free `new` into the ascending, duplicate-free `found`.
    private static func merge(_ new: ArraySlice<Int>, into found: inout [Int]) {
        guard let smallest = new.first else { return }
        guard let largest = found.last, smallest <= largest else {
            found.append(contentsOf: new)
            return
        }
        // Only the tail of `found` from `smallest` on can interleave with `new`.
        var low = 0
        var high = found.count
        while low < high {
            let middle = (low + high) / 2
            if found[middle] < smallest { low = middle + 1 } else { high = middle }
        }
        var merged: [Int] = []
        merged.reserveCapacity(found.count - low + new.count)
        var i = low
        var j = new.startIndex
        while i < found.count || j < new.endIndex {
            let next: Int
            if j == new.endIndex || (i < found.count && found[i] <= new[j]) {
                next = found[i]
                i += 1
            } else {
                next = new[j]
                j += 1
            }
            if merged.last != next { merged.append(next) }
        }
        found.replaceSubrange(low..., with: merged)
    }
}
