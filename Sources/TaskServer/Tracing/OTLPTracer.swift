import Synchronization
import TaskCore
import Tracing

/// The `ServiceContext` key of a span's W3C context: what a span started in a context descends
/// from, and what `inject` writes into `traceparent` / `tracestate`.
enum SpanContextKey: ServiceContextKey {
    typealias Value = SpanContext
    static var nameOverride: String? { "traceparent" }
}

extension ServiceContext {
    /// The W3C context of the span this context belongs to, if any.
    var spanContext: SpanContext? {
        get { self[SpanContextKey.self] }
        set { self[SpanContextKey.self] = newValue }
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
        return self.span(
            operationName,
            under: context.spanContext,
            kind: kind,
            at: SpanInstant(nanosecondsSinceEpoch: instant().nanosecondsSinceEpoch),
            keeping: context
        )
    }

    /// A span under `parent` (nil: a new trace's first span), with `own` as its context if given
    /// (else a new one, sampled as the sampler says): how the server starts its spans, without a
    /// `ServiceContext` (a dictionary of existentials, built and searched per span) unless a
    /// caller of the `Tracer` protocol gave one to keep.
    func span(
        _ name: String,
        under parent: SpanContext?,
        own: SpanContext? = nil,
        kind: SpanKind,
        at start: SpanInstant,
        keeping context: ServiceContext? = nil
    ) -> OTLPSpan {
        let own = own ?? self.newSpan(under: parent)
        return OTLPSpan(
            name: name,
            kind: kind,
            parentContext: context,
            own: own,
            parentSpanID: parent?.spanID ?? 0,
            start: start.nanosecondsSinceEpoch,
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
/// spans of a server that samples a few traces are such spans). A sampled one records straight
/// into the protobuf bytes it is exported as (`SpanAttributeWriter`): its ids and start when it
/// starts, each attribute and event as it is set, its name, end and status when it ends — no
/// dictionary of attributes, and nothing left for the exporter but to copy the bytes into their
/// batch. (Protobuf allows a message's fields in any order, and a repeated field's
/// elements between other fields.)
final class OTLPSpan: Tracing.Span {
    /// The context the span was started in, when a caller of the `Tracer` protocol gave one.
    private let parentContext: ServiceContext?
    /// Its own W3C context (also `context.spanContext`).
    let own: SpanContext
    private let name: String
    /// What a sampled span records; nil for an unsampled one.
    private let recorder: Recorder?

    private final class Recorder: Sendable {
        let start: UInt64
        let exporter: SpanExporter
        let state: Mutex<State>

        init(start: UInt64, exporter: SpanExporter, state: State) {
            self.start = start
            self.exporter = exporter
            self.state = Mutex(state)
        }
    }

    private struct State {
        var name: String
        /// The `Span` message's fields so far: ids, kind, start, then attributes and events.
        var fields: SpanAttributeWriter
        var events = 0
        var status: SpanStatus?
        var ended = false
    }

    init(
        name: String,
        kind: SpanKind,
        parentContext: ServiceContext?,
        own: SpanContext,
        parentSpanID: UInt64,
        start: UInt64,
        exporter: SpanExporter?
    ) {
        self.parentContext = parentContext
        self.own = own
        self.name = name
        guard let exporter else {
            self.recorder = nil
            return
        }
        var fields = SpanAttributeWriter(field: 9, capacity: 512)
        fields.writer.spanStart(own, parentSpanID: parentSpanID, kind: kind, start: start)
        self.recorder = Recorder(start: start, exporter: exporter, state: State(name: name, fields: fields))
    }

    var isRecording: Bool { self.recorder != nil }

    /// The span's context: its parent's, with the span's own W3C context in place of the parent's
    /// (made when asked for: most spans are never asked, and a context is an allocation or two).
    var context: ServiceContext {
        var context = self.parentContext ?? .topLevel
        context.spanContext = self.own
        return context
    }

    var operationName: String {
        get { self.recorder?.state.withLock { $0.name } ?? self.name }
        set { self.recorder?.state.withLock { $0.name = newValue } }
    }

    /// Write-only: a sampled span's attributes are already protobuf bytes, so reading them gives
    /// none, and setting them adds these (`update` is the way the server sets them).
    var attributes: SpanAttributes {
        get { SpanAttributes() }
        set {
            self.update { fields in
                // swift-format-ignore: ReplaceForEachWithForLoop
                newValue.forEach { fields.set($0, value: $1) }
            }
        }
    }

    /// Sets attributes, under one lock.
    func update(_ body: (inout SpanAttributeWriter) -> Void) {
        self.recorder?.state.withLock { state in if !state.ended { body(&state.fields) } }
    }

    func setStatus(_ status: SpanStatus) {
        self.recorder?.state.withLock { if !$0.ended { $0.status = status } }
    }

    /// Adds an event at `nanoseconds` since the epoch, with the attributes `body` sets.
    func addEvent(_ name: String, at nanoseconds: UInt64, _ body: (inout SpanAttributeWriter) -> Void = { _ in }) {
        guard let recorder else { return }
        var attributes = SpanAttributeWriter(field: 3, capacity: 64)
        body(&attributes)
        recorder.state.withLock { state in
            // Bounded: a span keeps its first 128 events (an attempt waits a few times at most).
            guard !state.ended, state.events < 128 else { return }
            state.events += 1
            state.fields.writer.event(name, at: nanoseconds, attributes: attributes.writer.bytes)
        }
    }

    func addEvent(_ event: SpanEvent) {
        self.addEvent(event.name, at: event.nanosecondsSinceEpoch) { fields in
            // swift-format-ignore: ReplaceForEachWithForLoop
            // (`SpanAttributes` is no `Sequence`: `forEach` is how it is read.)
            event.attributes.forEach { fields.set($0, value: $1) }
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
            // Moved out, not shared: the bytes are appended to below without a copy.
            defer { state.fields = SpanAttributeWriter(field: 9) }
            return state
        }
        guard var state else { return }
        state.fields.writer.spanEnd(
            name: state.name,
            end: max(recorder.start, instant().nanosecondsSinceEpoch),
            status: state.status
        )
        recorder.exporter.add(state.fields.writer.bytes)
    }
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
