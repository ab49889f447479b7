#if TASKSERVER_TSAN
import TaskCore

/// Under ThreadSanitizer, this module's locks are pthread mutexes that TSan can see (see
/// `TaskCore.TSanMutex`); every other build uses `Synchronization.Mutex`.
typealias Mutex<Value: ~Copyable> = TSanMutex<Value>
#endif
