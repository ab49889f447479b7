#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's limit of open file descriptors (`RLIMIT_NOFILE`), which bounds the connections the
/// server can hold whatever `--max-connections` says.
public enum DescriptorLimit {
    /// Descriptors kept for everything but client connections: the listener, the data file and its
    /// WAL, the outbound client's connections, worker pools' pipes, logs.
    public static let reserve = 256

    /// Raises the soft limit to the hard one (the common soft default of 1,024 is far below the
    /// default `--max-connections` of 4,096; an unprivileged process may raise its soft limit up to
    /// its hard one). Returns the soft limit in force afterwards, or nil when it cannot be read.
    @discardableResult
    public static func raiseSoftLimit() -> Int? {
        var limit = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &limit) == 0 else { return nil }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(RLIMIT_NOFILE_VALUE, &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur == rlim_t.max ? Int.max : Int(clamping: limit.rlim_cur)  // RLIM_INFINITY
    }

    #if canImport(Glibc)
    private static let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    private static let RLIMIT_NOFILE_VALUE = RLIMIT_NOFILE
    #endif
}
