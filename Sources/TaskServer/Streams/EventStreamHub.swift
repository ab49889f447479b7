import NIOCore
import Synchronization
import TaskCore

/// Where event streams wait, and how they get their turns: on their own event loops, in bounded
/// slices of time, however many streams follow a source.
///
/// Two problems of a burst (issue #27: a 4,000-item map followed by 1,000 streams stalled every
/// request, `/healthz` included, for 3–5 s):
/// - **Waking.** Each stream that has sent everything there is parks here under its source (a
///   job, or the server-wide feed). A source has at most one waiter on the source itself
///   (`EventStreamSource.waitForMore`), armed for the earliest position a parked stream waits
///   after; when it fires, the source's streams become runnable on their loops. So an append
///   costs the appending thread O(1) (one promise), not a wake-up per stream.
/// - **Turns.** NIO runs an event loop's tasks until none is left before it looks at its sockets
///   again, tasks queued by tasks included; a stream whose write completes at once (loopback
///   buffers hold megabytes) and queues its next chunk would keep a loop from its sockets until
///   every stream had drained everything. So a stream's next step is never run from its write's
///   completion: it joins its loop's runnable queue, which one task drains for at most `slice`,
///   then leaves the rest to a timer `pause` later — after the loop has served its sockets.
///   Any request on a loop then waits at most about one slice behind the streams.
///
/// - **Sharing.** Streams woken together mostly ask for the same chunk (everything after the
///   position they all reached): the first builds it, the others get the same bytes
///   (`chunk(of:after:)`); NIO writes one buffer to many sockets without a copy per socket.
///
/// Keep-alives: a sweep every `min(keepAlive, 1 s)` makes the streams idle past their deadline
/// runnable, and they write a comment.
final class EventStreamHub: Sendable {
    typealias Step = @Sendable () -> Void

    private struct Parked {
        let loop: ObjectIdentifier
        let deadline: UInt64
        let step: Step
    }

    private struct Source {
        var parked: [Parked] = []
        /// The position the source's waiter waits after, while one is armed.
        var armedAfter: Int?
    }

    /// One event loop's runnable streams.
    private struct Turns {
        let loop: any EventLoop
        var runnable = CircularBuffer<Step>()
        /// A task (or timer) that drains `runnable` is queued on the loop.
        var scheduled = false
    }

    /// The latest chunks built for a source, by the position they follow (at most
    /// `chunksPerSource`; the oldest goes first).
    private struct SharedChunks {
        var byPosition: [Int: EventChunk] = [:]
        var order: [Int] = []
    }

    private struct State {
        var sources: [String: Source] = [:]
        /// The latest chunks built for each source (at most `maxSharedChunks` sources).
        var chunks: [String: SharedChunks] = [:]
        var loops: [ObjectIdentifier: Turns] = [:]
        var sweeping = false
    }

    private let state = Mutex(State())
    let keepAlive: Duration
    /// How long a loop runs streams before it serves its sockets again.
    static let slice: UInt64 = 4_000_000
    /// The wait that lets a loop serve its sockets between two slices (a timer not yet due when
    /// the loop's task queue empties, so the loop polls its sockets first).
    static let pause: TimeAmount = .microseconds(500)

    /// Sources whose latest chunks are kept (each chunk at most `EventStreamPump.chunkBytes` and
    /// one event): past it, every kept chunk is dropped.
    static let maxSharedChunks = 256
    /// Chunks kept per source: readers that fell behind read from block boundaries
    /// (`FeedEventSource`), so a few kept chunks serve several of them.
    static let chunksPerSource = 8

    init(keepAlive: Duration) { self.keepAlive = keepAlive }

    /// The chunk of `source` after `position`: the one another stream of the source just built
    /// for the same position, or a new one (kept for the next stream to ask).
    func chunk<Source: EventStreamSource>(of source: Source, after position: Int) -> EventChunk {
        let key = source.key
        if let shared = self.state.withLock({ $0.chunks[key]?.byPosition[position] }) { return shared }
        let built = source.chunk(after: position)
        guard !built.bytes.isEmpty else { return EventChunk(bytes: ByteBuffer(), next: built.next, ends: built.ends) }
        let chunk = EventChunk(bytes: ByteBuffer(bytes: built.bytes), next: built.next, ends: built.ends)
        // A chunk that ends its stream is not kept: whether it ends may change (a redriven job's
        // history goes on after that terminal event), and each stream sends it once at most.
        if built.ends { return chunk }
        self.state.withLock { state in
            if state.chunks.count >= Self.maxSharedChunks, state.chunks[key] == nil { state.chunks.removeAll() }
            var shared = state.chunks[key] ?? SharedChunks()
            if shared.byPosition.updateValue(chunk, forKey: position) == nil { shared.order.append(position) }
            if shared.order.count > Self.chunksPerSource { shared.byPosition[shared.order.removeFirst()] = nil }
            state.chunks[key] = shared
        }
        return chunk
    }

    /// Parks a stream of source `key` that has sent everything after `position`: `step` runs on
    /// `loop` once the source has more (`waitForMore` is its waiter), or at `deadline` (monotonic
    /// nanoseconds) for a keep-alive.
    func park(
        _ key: String,
        after position: Int,
        loop: any EventLoop,
        deadline: UInt64,
        waitForMore: @escaping @Sendable (Int) -> Future<Void>,
        step: @escaping Step
    ) {
        let (arm, sweep): (Bool, Bool) = self.state.withLock { state in
            let id = ObjectIdentifier(loop)
            if state.loops[id] == nil { state.loops[id] = Turns(loop: loop) }
            var source = state.sources.removeValue(forKey: key) ?? Source()
            source.parked.append(Parked(loop: id, deadline: deadline, step: step))
            let arm = source.armedAfter.map { position < $0 } ?? true
            if arm { source.armedAfter = position }
            state.sources[key] = source
            let sweep = !state.sweeping
            state.sweeping = true
            return (arm, sweep)
        }
        if sweep { self.scheduleSweep() }
        guard arm else { return }
        // Long enough for any stream: keep-alives are the sweep's business.
        waitForMore(position).whenComplete { _ in self.wake(key, armedAfter: position) }
    }

    /// Runs `step` on `loop` in the stream's next turn.
    func runSoon(on loop: any EventLoop, _ step: @escaping Step) {
        let id = ObjectIdentifier(loop)
        let drain = self.state.withLock { state in
            if state.loops[id] == nil { state.loops[id] = Turns(loop: loop) }
            state.loops[id]!.runnable.append(step)
            return Self.claimDrain(&state, id)
        }
        if drain { loop.execute { self.drain(id) } }
    }

    /// The source's waiter fired: every stream parked on it becomes runnable on its loop.
    private func wake(_ key: String, armedAfter: Int) {
        let drains: [(any EventLoop, ObjectIdentifier)] = self.state.withLock { state in
            guard var source = state.sources.removeValue(forKey: key) else { return [] }
            if source.armedAfter == armedAfter { source.armedAfter = nil }
            let parked = source.parked
            source.parked = []
            if source.armedAfter != nil { state.sources[key] = source }
            return Self.makeRunnable(parked, &state)
        }
        for (loop, id) in drains { loop.execute { self.drain(id) } }
    }

    /// Queues `parked` on their loops; returns the loops whose drain the caller must queue.
    private static func makeRunnable(_ parked: [Parked], _ state: inout State) -> [(any EventLoop, ObjectIdentifier)] {
        var drains: [(any EventLoop, ObjectIdentifier)] = []
        for stream in parked {
            state.loops[stream.loop]!.runnable.append(stream.step)
            if Self.claimDrain(&state, stream.loop) { drains.append((state.loops[stream.loop]!.loop, stream.loop)) }
        }
        return drains
    }

    /// Whether the loop's drain must be queued (it was not; now it is, as far as others know).
    private static func claimDrain(_ state: inout State, _ id: ObjectIdentifier) -> Bool {
        if state.loops[id]!.scheduled { return false }
        state.loops[id]!.scheduled = true
        return true
    }

    /// On the loop: runs its runnable streams for at most `slice`, then, if any are left, pauses
    /// so that the loop serves its sockets before the next slice.
    private func drain(_ id: ObjectIdentifier) {
        let start = monotonicNanoseconds()
        while true {
            let batch: [Step] = self.state.withLock { state in
                let count = min(16, state.loops[id]!.runnable.count)
                if count == 0 { state.loops[id]!.scheduled = false }
                let batch = Array(state.loops[id]!.runnable.prefix(count))
                state.loops[id]!.runnable.removeFirst(count)
                return batch
            }
            if batch.isEmpty { return }
            for step in batch { step() }
            if monotonicNanoseconds() &- start >= Self.slice {
                let loop: (any EventLoop)? = self.state.withLock { state in
                    if state.loops[id]!.runnable.isEmpty {
                        state.loops[id]!.scheduled = false
                        return nil
                    }
                    return state.loops[id]!.loop
                }
                loop?.scheduleTask(in: Self.pause) { self.drain(id) }
                return
            }
        }
    }

    // MARK: - Keep-alives

    private var sweepInterval: Duration { min(self.keepAlive, .seconds(1)) }

    private func scheduleSweep() {
        TimerQueue.shared.schedule(after: self.sweepInterval) { [weak self] in self?.sweep() }
    }

    /// Makes the streams idle past their deadline runnable, so that they send a keep-alive.
    private func sweep() {
        let now = monotonicNanoseconds()
        let (drains, again): ([(any EventLoop, ObjectIdentifier)], Bool) = self.state.withLock { state in
            var due: [Parked] = []
            for key in Array(state.sources.keys) {
                var source = state.sources[key]!
                due += source.parked.filter { $0.deadline <= now }
                source.parked.removeAll { $0.deadline <= now }
                state.sources[key] = source.parked.isEmpty && source.armedAfter == nil ? nil : source
            }
            let drains = Self.makeRunnable(due, &state)
            state.sweeping = !state.sources.isEmpty
            return (drains, state.sweeping)
        }
        for (loop, id) in drains { loop.execute { self.drain(id) } }
        if again { self.scheduleSweep() }
    }

    /// Streams parked now (tests).
    var parkedCount: Int { self.state.withLock { $0.sources.values.reduce(0) { $0 + $1.parked.count } } }
}

/// A chunk of an event stream: its bytes (shared by the streams that send it), the position after
/// it, and whether the stream ends with it.
struct EventChunk: Sendable {
    let bytes: ByteBuffer
    let next: Int
    let ends: Bool
}
