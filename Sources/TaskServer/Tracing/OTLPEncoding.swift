import Tracing

/// Spans as an OTLP `ExportTraceServiceRequest` in protobuf's binary encoding
/// (opentelemetry-proto `collector/trace/v1/trace_service.proto` and `trace/v1/trace.proto`).
///
/// Written by hand, as the store's SQL is: the handful of messages an export needs take ~150
/// lines, where swift-protobuf and its generated code would add minutes to every clean build.
/// `Tests/tracing/otlp_receiver.py` decodes what this writes with the official Python classes.
struct OTLPEncoding {
    /// `service.name`, `service.version` and the configured resource attributes.
    let resource: [(key: String, value: String)]
    let scopeName: String
    let scopeVersion: String

    init(configuration: TracingConfiguration) {
        self.resource =
            [("service.name", configuration.serviceName), ("service.version", TaskServerVersion.current)]
            + configuration.resourceAttributes
        self.scopeName = "taskserver"
        self.scopeVersion = TaskServerVersion.current
    }

    /// The request body that exports `spans`.
    func request(_ spans: some Collection<FinishedSpan>) -> [UInt8] {
        var writer = ProtobufWriter()
        writer.bytes.reserveCapacity(64 + spans.count * 320)
        // ExportTraceServiceRequest.resource_spans = 1
        writer.message(1) { writer in
            // ResourceSpans.resource = 1 → Resource.attributes = 1
            writer.message(1) { writer in
                for (key, value) in self.resource { writer.keyValue(1, key, .string(value)) }
            }
            // ResourceSpans.scope_spans = 2
            writer.message(2) { writer in
                // ScopeSpans.scope = 1 → InstrumentationScope {name = 1, version = 2}
                writer.message(1) { writer in
                    writer.string(1, self.scopeName)
                    writer.string(2, self.scopeVersion)
                }
                for span in spans { writer.message(2) { writer in writer.span(span) } }
            }
        }
        return writer.bytes
    }
}

/// Protobuf's binary encoding, the parts OTLP needs.
struct ProtobufWriter {
    var bytes: [UInt8] = []

    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            self.bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        self.bytes.append(UInt8(value))
    }

    mutating func tag(_ field: Int, _ wireType: UInt64) { self.varint(UInt64(field) << 3 | wireType) }

    mutating func fixed64(_ field: Int, _ value: UInt64) {
        self.tag(field, 1)
        withUnsafeBytes(of: value.littleEndian) { self.bytes.append(contentsOf: $0) }
    }

    mutating func uint64(_ field: Int, _ value: UInt64) {
        self.tag(field, 0)
        self.varint(value)
    }

    mutating func string(_ field: Int, _ value: String) {
        self.tag(field, 2)
        var value = value
        value.withUTF8 { utf8 in
            self.varint(UInt64(utf8.count))
            self.bytes.append(contentsOf: utf8)
        }
    }

    /// A big-endian word as bytes (ids).
    mutating func idBytes(_ field: Int, _ words: UInt64...) {
        self.tag(field, 2)
        self.varint(UInt64(words.count * 8))
        for word in words { withUnsafeBytes(of: word.bigEndian) { self.bytes.append(contentsOf: $0) } }
    }

    /// A length-delimited embedded message: its body is written after a one-byte length, which
    /// grows (the body moved up) when the body is 128 bytes or more.
    mutating func message(_ field: Int, _ body: (inout ProtobufWriter) -> Void) {
        self.tag(field, 2)
        let lengthAt = self.bytes.count
        self.bytes.append(0)
        body(&self)
        let length = self.bytes.count - lengthAt - 1
        if length < 0x80 {
            self.bytes[lengthAt] = UInt8(length)
            return
        }
        var prefix = ProtobufWriter()
        prefix.varint(UInt64(length))
        self.bytes.replaceSubrange(lengthAt..<(lengthAt + 1), with: prefix.bytes)
    }

    /// A `KeyValue {key = 1, value = 2 (AnyValue)}`.
    mutating func keyValue(_ field: Int, _ key: String, _ value: SpanAttribute) {
        self.message(field) { writer in
            writer.string(1, key)
            writer.message(2) { writer in writer.anyValue(value) }
        }
    }

    /// `AnyValue {string_value = 1, bool_value = 2, int_value = 3, double_value = 4, array_value = 5}`.
    mutating func anyValue(_ value: SpanAttribute) {
        switch value {
        case .string(let text): self.string(1, text)
        case .bool(let flag): self.uint64(2, flag ? 1 : 0)
        case .int64(let number): self.uint64(3, UInt64(bitPattern: number))
        case .int32(let number): self.uint64(3, UInt64(bitPattern: Int64(number)))
        case .double(let number): self.fixed64(4, number.bitPattern)
        case .stringArray(let texts):
            self.message(5) { writer in for text in texts { writer.message(1) { $0.string(1, text) } } }
        case .int64Array(let numbers):
            self.message(5) { writer in
                for number in numbers { writer.message(1) { $0.uint64(3, UInt64(bitPattern: number)) } }
            }
        case .stringConvertible(let value): self.string(1, value.description)
        default: self.string(1, "\(value)")
        }
    }

    /// A `Span` message's fields.
    mutating func span(_ span: FinishedSpan) {
        self.idBytes(1, span.traceID.high, span.traceID.low)
        self.idBytes(2, span.spanID)
        if let state = span.traceState { self.string(3, state) }
        if span.parentSpanID != 0 { self.idBytes(4, span.parentSpanID) }
        self.string(5, span.name)
        self.uint64(6, Self.kind(span.kind))
        self.fixed64(7, span.start)
        self.fixed64(8, span.end)
        // swift-format-ignore: ReplaceForEachWithForLoop
        // (`SpanAttributes` is no `Sequence`: `forEach` is how it is read.)
        span.attributes.forEach { key, value in self.keyValue(9, key, value) }
        for event in span.events {
            // Span.events = 11: Event {time_unix_nano = 1, name = 2, attributes = 3}
            self.message(11) { writer in
                writer.fixed64(1, event.nanosecondsSinceEpoch)
                writer.string(2, event.name)
                // swift-format-ignore: ReplaceForEachWithForLoop
                event.attributes.forEach { key, value in writer.keyValue(3, key, value) }
            }
        }
        if let status = span.status {
            // Span.status = 15: Status {message = 2, code = 3 (1 ok, 2 error)}
            self.message(15) { writer in
                if let message = status.message { writer.string(2, message) }
                writer.uint64(3, status.code == .ok ? 1 : 2)
            }
        }
    }

    /// `SpanKind`: internal 1, server 2, client 3, producer 4, consumer 5.
    static func kind(_ kind: SpanKind) -> UInt64 {
        switch kind {
        case .internal: 1
        case .server: 2
        case .client: 3
        case .producer: 4
        case .consumer: 5
        }
    }
}
