/// How much slower than a plain debug build this test run is allowed to be.
///
/// ThreadSanitizer's run (`-DTASKSERVER_TSAN`) executes instrumented code roughly 5–15× slower, on
/// the same two cores, so every wall-clock bound in a test — "answers within 2 s", a suite's time
/// limit — is multiplied by this factor. A bound scaled this way still fails on a real stall (a
/// hang, or a wait for a timeout that should not have been waited for); it only stops failing on
/// a machine that is merely slow.
public enum TestTiming {
    #if TASKSERVER_TSAN
    public static let slowdown = 8
    #else
    public static let slowdown = 1
    #endif

    /// `milliseconds`, scaled for this run.
    public static func ms(_ milliseconds: Int) -> Int { milliseconds * slowdown }

    /// `duration`, scaled for this run.
    public static func scaled(_ duration: Duration) -> Duration { duration * slowdown }
}
