import Synchronization
import TaskCore
import Tracing

/// The `ServiceContext` key of a span's W3C context: what a span started in a context descends
/// from, and what `inject` writes into `traceparent` / `tracestate`.
enum SpanContextKey: ServiceContextKey {
    typealias Value = SpanContext
    static var nameOverride: String? { "traceparent" }
}

/// The context the next span started in a context must have: a job's span, whose id was chosen
/// (and stored with the job, `JobTraceLabel`) when the job was submitted, so that its attempts
/// could name it as their parent long before it ends.
enum PresetSpanKey: ServiceContextKey {
    typealias Value = SpanContext
}

extension ServiceContext {
    /// The W3C context of the span this context belongs to, if any.
    var spanContext: SpanContext? {
        get { self[SpanContextKey.self] }
        set { self[SpanContextKey.self] = newValue }
    }

    /// A context whose spans descend from `parent` (nil: they start traces of their own).
    static func descending(from parent: SpanContext?) -> ServiceContext {
        var context = ServiceContext.topLevel
        context.spanContext = parent
        return context
    }
}

/// The tracer the server instruments through (swift-distributed-tracing's `Tracer`): spans of
/// sampled traces go to the `SpanExporter` when they end; spans of unsampled ones record
/// nothing but carry their context on, so the trace id still reaches outbound calls and workers.
///
/// A span without a parent starts a new trace, sampled by `Sampler`; one with a parent keeps the
/// parent's trace and, under the `parentbased_…` samplers, its sampled flag.
final class OTLPTracer: Tracer {
    typealias Span = OTLPSpan

    let exporter: SpanExporter
    let sampler: Sampler

    init(exporter: SpanExporter, sampler: Sampler) {
        self.exporter = exporter
        self.sampler = sampler
    }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String,
        context: @autoclosure () -> ServiceContext,
        ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant,
        function: String,
        file fileID: String,
        line: UInt
    ) -> OTLPSpan {
        let context = context()
        let parent = context.spanContext
        let own = context[PresetSpanKey.self] ?? self.newSpan(under: parent)
        return OTLPSpan(
            name: operationName,
            kind: kind,
            parentContext: context,
            own: own,
            parentSpanID: parent?.spanID ?? 0,
            start: instant().nanosecondsSinceEpoch,
            exporter: own.sampled ? self.exporter : nil
        )
    }

    /// A new span's context: in `parent`'s trace (sampled as the sampler says of a child of it),
    /// or, without a parent, in a new trace.
    func newSpan(under parent: SpanContext?) -> SpanContext {
        guard let parent else {
            let traceID = TraceIDs.traceID()
            return SpanContext(
                traceID: traceID,
                spanID: TraceIDs.spanID(),
                sampled: self.sampler.samples(traceID, parentSampled: nil)
            )
        }
        return SpanContext(
            traceID: parent.traceID,
            spanID: TraceIDs.spanID(),
            sampled: self.sampler.samples(parent.traceID, parentSampled: parent.sampled),
            traceState: parent.traceState
        )
    }

    /// `startSpan` called directly (not through the protocol extension's generic defaults, which
    /// look up generic metadata at run time on every call).
    func span(_ name: String, in context: ServiceContext, kind: SpanKind, at instant: SpanInstant) -> OTLPSpan {
        self.startSpan(name, context: context, ofKind: kind, at: instant, function: "", file: "", line: 0)
    }

    func forceFlush() { _ = self.exporter.flush() }

    func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier,
        into context: inout ServiceContext,
        using extractor: Extract
    ) where Extract.Carrier == Carrier {
        guard let traceparent = extractor.extract(key: "traceparent", from: carrier),
            let parent = SpanContext(
                traceparent: traceparent,
                tracestate: extractor.extract(key: "tracestate", from: carrier)
            )
        else { return }
        context.spanContext = parent
    }

    func inject<Carrier, Inject: Injector>(
        _ context: ServiceContext,
        into carrier: inout Carrier,
        using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let spanContext = context.spanContext else { return }
        injector.inject(spanContext.traceparent, forKey: "traceparent", into: &carrier)
        if let state = spanContext.traceState { injector.inject(state, forKey: "tracestate", into: &carrier) }
    }
}

/// A span of `OTLPTracer`. Ends once; what is set after its end is ignored.
///
/// An unsampled span is its context and nothing else: no lock, no attributes, no events (most
/// spans of a server that samples a few traces are such spans).
final class OTLPSpan: Tracing.Span {
    /// The context the span was started in (its parent's).
    private let parentContext: ServiceContext
    /// Its own W3C context (also `context.spanContext`).
    let own: SpanContext
    private let name: String
    /// What a sampled span records; nil for an unsampled one.
    private let recorder: Recorder?

    private final class Recorder: Sendable {
        let kind: SpanKind
        let parentSpanID: UInt64
        let start: UInt64
        let exporter: SpanExporter
        let state: Mutex<State>

        init(name: String, kind: SpanKind, parentSpanID: UInt64, start: UInt64, exporter: SpanExporter) {
            self.kind = kind
            self.parentSpanID = parentSpanID
            self.start = start
            self.exporter = exporter
            self.state = Mutex(State(name: name))
        }
    }

    private struct State {
        var name: String
        var attributes = SpanAttributes()
        var events: [SpanEvent] = []
        var status: SpanStatus?
        var ended = false
    }

    init(
        name: String,
        kind: SpanKind,
        parentContext: ServiceContext,
        own: SpanContext,
        parentSpanID: UInt64,
        start: UInt64,
        exporter: SpanExporter?
    ) {
        self.parentContext = parentContext
        self.own = own
        self.name = name
        self.recorder = exporter.map {
            Recorder(name: name, kind: kind, parentSpanID: parentSpanID, start: start, exporter: $0)
        }
    }

    var isRecording: Bool { self.recorder != nil }

    /// The span's context: its parent's, with the span's own W3C context in place of the parent's
    /// (made when asked for: most spans are never asked, and a context is an allocation or two).
    var context: ServiceContext {
        var context = self.parentContext
        context[PresetSpanKey.self] = nil
        context.spanContext = self.own
        return context
    }

    var operationName: String {
        get { self.recorder?.state.withLock { $0.name } ?? self.name }
        set { self.recorder?.state.withLock { $0.name = newValue } }
    }

    var attributes: SpanAttributes {
        get { self.recorder?.state.withLock { $0.attributes } ?? SpanAttributes() }
        set { self.recorder?.state.withLock { if !$0.ended { $0.attributes = newValue } } }
    }

    /// Sets several attributes under one lock.
    func update(_ body: (inout SpanAttributes) -> Void) {
        self.recorder?.state.withLock { state in if !state.ended { body(&state.attributes) } }
    }

    func setStatus(_ status: SpanStatus) {
        self.recorder?.state.withLock { if !$0.ended { $0.status = status } }
    }

    func addEvent(_ event: SpanEvent) {
        self.recorder?.state.withLock { state in
            // Bounded: a span keeps its first 128 events (an attempt waits a few times at most).
            if !state.ended, state.events.count < 128 { state.events.append(event) }
        }
    }

    /// Records an error as the specification's `exception` event, its type only: an error's text
    /// may quote users' data.
    func recordError<Instant: TracerInstant>(
        _ error: any Error,
        attributes: SpanAttributes,
        at instant: @autoclosure () -> Instant
    ) {
        guard self.isRecording else { return }
        var attributes = attributes
        attributes["exception.type"] = "\(type(of: error))"
        self.addEvent(SpanEvent(name: "exception", at: instant(), attributes: attributes))
    }

    func addLink(_ link: SpanLink) {}

    func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        guard let recorder else { return }
        let state: State? = recorder.state.withLock { state in
            if state.ended { return nil }
            state.ended = true
            return state
        }
        guard let state else { return }
        recorder.exporter.add(
            FinishedSpan(
                traceID: self.own.traceID,
                spanID: self.own.spanID,
                parentSpanID: recorder.parentSpanID,
                traceState: self.own.traceState,
                name: state.name,
                kind: recorder.kind,
                start: recorder.start,
                end: max(recorder.start, instant().nanosecondsSinceEpoch),
                attributes: state.attributes,
                events: state.events,
                status: state.status
            )
        )
    }
}

/// A span as it is exported: ended, sampled.
struct FinishedSpan: Sendable {
    var traceID: TraceID
    var spanID: UInt64
    /// 0: none (a root span).
    var parentSpanID: UInt64
    var traceState: String?
    var name: String
    var kind: SpanKind
    /// Nanoseconds since the Unix epoch.
    var start: UInt64
    var end: UInt64
    var attributes: SpanAttributes
    var events: [SpanEvent]
    var status: SpanStatus?
}

/// A `TracerInstant` at a given time: a job's span starts when the job was created, which may be
/// long before (and on another server than) the moment it ends.
struct SpanInstant: TracerInstant {
    let nanosecondsSinceEpoch: UInt64

    init(nanosecondsSinceEpoch: UInt64) { self.nanosecondsSinceEpoch = nanosecondsSinceEpoch }

    init(milliseconds: Int64) { self.nanosecondsSinceEpoch = UInt64(max(0, milliseconds)) &* 1_000_000 }

    static func < (lhs: SpanInstant, rhs: SpanInstant) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }

    /// Now, by the wall clock.
    static func now() -> SpanInstant {
        SpanInstant(nanosecondsSinceEpoch: DefaultTracerClock.now.nanosecondsSinceEpoch)
    }
}
