import Foundation
import Synchronization

/// The write end of the pipe the SIGTERM/SIGINT handler writes to (-1 until it is installed).
private let terminationSignalPipe = Atomic<Int32>(-1)

/// Runs in signal context: only async-signal-safe calls (an atomic load, `write`).
private func handleTerminationSignal(_ signal: Int32) {
    let saved = errno
    var byte = UInt8(truncatingIfNeeded: signal)
    _ = write(terminationSignalPipe.load(ordering: .relaxed), &byte, 1)
    errno = saved
}

/// SIGTERM and SIGINT for `taskserver worker`: a handler that writes to a pipe, rather than
/// `SIG_IGN` and a dispatch source as `serve` does, because commands inherit ignored signals
/// (Foundation's `Process` does not reset them) but not handlers: a command must still die of
/// the SIGTERM the worker passes on.
package enum WorkerSignals {
    /// Installs the handler; returns the read end of its pipe.
    package static func install() -> Int32 {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return -1 }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        terminationSignalPipe.store(fds[1], ordering: .relaxed)
        var action = sigaction()
        action.__sigaction_handler.sa_handler = handleTerminationSignal
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(SIGTERM, &action, nil)
        sigaction(SIGINT, &action, nil)
        return fds[0]
    }

    private static var set: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        return set
    }

    /// Blocks SIGTERM and SIGINT in the calling thread (and the threads it starts); returns the
    /// mask before.
    static func block() -> sigset_t {
        var set = Self.set
        var old = sigset_t()
        pthread_sigmask(SIG_BLOCK, &set, &old)
        return old
    }

    static func restore(_ mask: sigset_t) {
        var mask = mask
        pthread_sigmask(SIG_SETMASK, &mask, nil)
    }
}
