#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Starts a detached POSIX thread that runs `main` (the worker pools' and the timer queue's own
/// threads: never Swift's cooperative pool, whose threads must not block). `what` names the thread
/// in the message of the precondition that a thread could be started.
func startDetachedThread(_ what: @autoclosure () -> String, _ main: @escaping @Sendable () -> Void) {
    final class Main: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
    let box = Unmanaged.passRetained(Main(main))
    var thread = pthread_t()
    let status = pthread_create(
        &thread,
        nil,
        { raw in
            Unmanaged<Main>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        },
        box.toOpaque()
    )
    precondition(status == 0, "TaskCore: cannot start \(what()) (\(status))")
    pthread_detach(thread)
}
