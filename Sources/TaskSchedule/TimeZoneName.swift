import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension CronSchedule {
    /// Where the system keeps the IANA tz database (Debian's and Fedora's `tzdata`).
    static let zoneDirectory = "/usr/share/zoneinfo"

    /// The zone named `name` in the IANA tz database, such as `UTC` (always known) or
    /// `Europe/Paris`; throws for any other name.
    ///
    /// A name is accepted when it is a zone file of the system's tz database (a TZif file under
    /// `/usr/share/zoneinfo`, outside its `posix/` and `right/` copies and other than `localtime`
    /// and `posixrules`) *and* Foundation's `TimeZone` knows it, for that computes the offsets.
    /// So links kept by the database are accepted (`US/Eastern`, `Asia/Calcutta`, `EST`, `CET`,
    /// and `Etc/GMT+2`, which is UTC−2 as POSIX has it), while names that only Foundation (ICU)
    /// knows are refused: offsets such as `GMT+2` or `UTC+01:00`, and the abbreviations that are
    /// not database names (`PST`, `IST`). Case matters, as in the database (`europe/paris` is
    /// refused).
    public static func timeZone(named name: String) throws(CronError) -> TimeZone {
        if name == "UTC", let utc = TimeZone(identifier: "UTC") {
            return utc
        }
        if name.isEmpty {
            throw CronError(.timeZone, "the time zone name is empty")
        }
        guard isDatabaseName(name), let zone = TimeZone(identifier: name) else {
            throw CronError(
                .timeZone,
                "unknown time zone \"\(name)\": expected a name of the IANA tz database, such as "
                    + "\"Europe/Paris\" or \"UTC\""
            )
        }
        return zone
    }

    /// Whether `name` is a zone of the system's tz database.
    static func isDatabaseName(_ name: String) -> Bool {
        let components = name.split(separator: "/", omittingEmptySubsequences: false)
        let isNameCharacter: (UInt8) -> Bool = { byte in
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "+"):
                true
            default:
                false
            }
        }
        guard name.utf8.count <= 255,
            components.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy(isNameCharacter) }),
            !["posix", "right"].contains(components[0]),
            !["localtime", "posixrules"].contains(name)
        else {
            return false
        }
        return isZoneFile("\(zoneDirectory)/\(name)")
    }

    /// Whether the file at `path` begins like a compiled zone (TZif, RFC 9636).
    private static func isZoneFile(_ path: String) -> Bool {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var magic: (UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0)
        let count = withUnsafeMutableBytes(of: &magic) { read(descriptor, $0.baseAddress, 4) }
        return count == 4 && magic == (0x54, 0x5A, 0x69, 0x66)  // "TZif"
    }
}
