import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore

/// A response body written over time (server-sent events, SPEC §7).
///
/// A handler answers with `Response.streaming(…)`; once the head is written, the HTTP handler calls
/// `start` with a `StreamWriter` for the connection. The producer writes chunks one at a time —
/// `write` completes when the bytes reached the socket, which is the backpressure: a producer that
/// waits for each write never holds more than one chunk for a slow reader — and `finish`es it. A
/// streamed response always ends its connection (no keep-alive after it).
public struct ResponseStream: Sendable {
    let start: @Sendable (StreamWriter) -> Void

    public init(_ start: @escaping @Sendable (StreamWriter) -> Void) {
        self.start = start
    }
}

/// The producer's end of a streamed response.
public final class StreamWriter: Sendable {
    /// A write that has not reached the socket in this long cuts the reader off (it can resume).
    public static let writeTimeout: Duration = .seconds(10)

    private let channel: any Channel
    private let finished = Atomic<Bool>(false)
    /// Fires when the connection closes, whoever closed it.
    public let closed: CancellationToken
    private let registry: StreamRegistry?

    init(channel: any Channel, closed: CancellationToken, registry: StreamRegistry?) {
        self.channel = channel
        self.closed = closed
        self.registry = registry
    }

    /// The event loop of the stream's connection.
    public var eventLoop: any EventLoop { self.channel.eventLoop }

    /// Whether the stream ended (finished, or its connection closed).
    public var isFinished: Bool { self.finished.load(ordering: .acquiring) || self.closed.isCancellationRequested }

    /// Writes `bytes` as one chunk; the future completes when they reached the socket, and fails
    /// when the connection closed or the reader did not take them within `writeTimeout` (the
    /// connection is then closed).
    /// `bytes` may be shared with other streams (`EventStreamHub.chunk`): NIO writes a buffer's
    /// storage as it is, so a chunk many streams send is never copied per stream.
    public func write(_ bytes: ByteBuffer) -> Future<Void> {
        if self.isFinished { return Future(error: StreamError.closed) }
        let promise = Promise<Void>()
        let channel = self.channel
        let write: @Sendable () -> Void = {
            // On the connection's loop, not the process-wide timer queue: a thousand streams
            // writing a chunk each must not all take one lock.
            let timer = channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(Self.writeTimeout.clampedNanoseconds))) {
                // A slow reader: its bounded buffer (one chunk) did not drain in time.
                if promise.tryFail(StreamError.slowReader) { channel.close(promise: nil) }
            }
            channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(bytes))).whenComplete { result in
                timer.cancel()
                switch result {
                case .success: promise.trySucceed(())
                case .failure(let error): promise.tryFail(error)
                }
            }
        }
        // A stream's pump runs on its loop (`EventStreamHub`): no hop then.
        if channel.eventLoop.inEventLoop { write() } else { channel.eventLoop.execute(write) }
        return promise.future
    }

    /// Ends the response and closes the connection (once; later calls do nothing).
    public func finish() {
        guard !self.finished.exchange(true, ordering: .acquiringAndReleasing) else { return }
        self.registry?.remove(self)
        let channel = self.channel
        channel.eventLoop.execute {
            channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in channel.close(promise: nil) }
        }
    }
}

/// The streams open on a server, so that a drain (SIGTERM) can end them all at once.
public final class StreamRegistry: Sendable {
    private let writers = Mutex<[ObjectIdentifier: StreamWriter]>([:])

    public init() {}

    public var count: Int { self.writers.withLock { $0.count } }

    func add(_ writer: StreamWriter) {
        self.writers.withLock { $0[ObjectIdentifier(writer)] = writer }
        _ = writer.closed.register { [weak self, weak writer] in
            if let writer { self?.remove(writer) }
        }
    }

    func remove(_ writer: StreamWriter) {
        _ = self.writers.withLock { $0.removeValue(forKey: ObjectIdentifier(writer)) }
    }

    /// Finishes every open stream.
    public func finishAll() {
        let all = self.writers.withLock { writers in
            defer { writers = [:] }
            return Array(writers.values)
        }
        for writer in all { writer.finish() }
    }
}

/// Why a stream write failed.
public enum StreamError: Error, Sendable {
    /// The stream ended or its connection closed.
    case closed
    /// The reader did not take a chunk within `StreamWriter.writeTimeout`; it was cut off.
    case slowReader
}
