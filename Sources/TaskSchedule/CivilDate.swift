/// A date of the proleptic Gregorian calendar, and the day arithmetic the schedule needs: Howard
/// Hinnant's `days_from_civil` and `civil_from_days` (http://howardhinnant.github.io/date_algorithms.html),
/// exact for every `Int` year that fits, with no calendar object and no time zone.
struct CivilDate: Equatable {
    var year: Int
    var month: Int
    var day: Int

    /// The date `daysSinceEpoch` days after 1970-01-01 (negative: before).
    init(daysSinceEpoch days: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153  // 0 is March
        day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    }

    init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// The number of days from 1970-01-01 to this date.
    var daysSinceEpoch: Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The day of the week of the day `days` after 1970-01-01 (a Thursday), Sunday being 0.
    static func weekday(daysSinceEpoch days: Int) -> Int {
        let remainder = (days + 4) % 7
        return remainder < 0 ? remainder + 7 : remainder
    }

    static func isLeapYear(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    static func daysInMonth(_ month: Int, year: Int) -> Int {
        daysInMonth(month, leapYear: isLeapYear(year))
    }

    static func daysInMonth(_ month: Int, leapYear: Bool) -> Int {
        switch month {
        case 2: leapYear ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}

/// `value` divided by `divisor` (positive), rounded toward negative infinity.
func floorDivide(_ value: Int, _ divisor: Int) -> Int {
    let quotient = value / divisor
    return value % divisor < 0 ? quotient - 1 : quotient
}
