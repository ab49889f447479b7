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

    /// The request body that exports a batch of spans (`ScopeSpans.spans` fields, as
    /// `SpanExporter.Batch` holds them).
    func request(_ spans: [UInt8]) -> [UInt8] {
        var writer = ProtobufWriter()
        writer.bytes.reserveCapacity(256 + spans.count)
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
                writer.bytes.append(contentsOf: spans)
            }
        }
        return writer.bytes
    }
}

/// A span's (or an event's) attributes, written as protobuf `KeyValue`s the moment they are set.
///
/// OTLP wants an attribute's key once per span; the server sets each once (debug builds check),
/// so nothing is looked up or replaced.
struct SpanAttributeWriter {
    var writer = ProtobufWriter()
    /// The `KeyValue`s' field: 9 in a `Span`, 3 in an `Event`.
    let field: Int
    #if DEBUG
    private var keys: Set<String> = []
    #endif

    init(field: Int, capacity: Int = 0) {
        self.field = field
        self.writer.bytes.reserveCapacity(capacity)
    }

    mutating func set(_ key: String, value: SpanAttribute) {
        self.checkOnce(key)
        self.writer.keyValue(self.field, key, value)
    }

    /// A string attribute (how the server sets its own: no `SpanAttribute` in between).
    mutating func set(_ key: StaticString, _ value: String) {
        self.checkOnce(key.description)
        self.writer.keyValue(self.field, key, string: value)
    }

    /// An integer attribute.
    mutating func set(_ key: StaticString, _ value: Int64) {
        self.checkOnce(key.description)
        self.writer.keyValue(self.field, key, int: value)
    }

    private mutating func checkOnce(_ key: @autoclosure () -> String) {
        #if DEBUG
        let key = key()
        assert(self.keys.insert(key).inserted, "the span attribute \(key) was set twice")
        #endif
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

    /// A `KeyValue` whose `AnyValue` is `string_value` (1), its lengths counted up front: no
    /// length to move, no closure, nothing but appends.
    mutating func keyValue(_ field: Int, _ key: StaticString, string value: String) {
        var value = value
        value.withUTF8 { utf8 in
            self.keyValueHead(field, key, anyValueLength: 1 + Self.varintSize(UInt64(utf8.count)) + utf8.count)
            self.tag(1, 2)
            self.varint(UInt64(utf8.count))
            self.bytes.append(contentsOf: utf8)
        }
    }

    /// A `KeyValue` whose `AnyValue` is `int_value` (3).
    mutating func keyValue(_ field: Int, _ key: StaticString, int value: Int64) {
        let number = UInt64(bitPattern: value)
        self.keyValueHead(field, key, anyValueLength: 1 + Self.varintSize(number))
        self.tag(3, 0)
        self.varint(number)
    }

    /// A `KeyValue`'s tag and length, its `key` (1), and the tag and length of its `value` (2).
    private mutating func keyValueHead(_ field: Int, _ key: StaticString, anyValueLength: Int) {
        key.withUTF8Buffer { key in
            let keyValueLength =
                1 + Self.varintSize(UInt64(key.count)) + key.count
                + 1 + Self.varintSize(UInt64(anyValueLength)) + anyValueLength
            self.tag(field, 2)
            self.varint(UInt64(keyValueLength))
            self.tag(1, 2)
            self.varint(UInt64(key.count))
            self.bytes.append(contentsOf: key)
            self.tag(2, 2)
            self.varint(UInt64(anyValueLength))
        }
    }

    /// How many bytes `varint` writes for `value`.
    static func varintSize(_ value: UInt64) -> Int {
        value < 0x80 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7
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

    /// A length-delimited field of bytes already encoded (an embedded message's body).
    mutating func bytes(_ field: Int, _ body: [UInt8]) {
        self.tag(field, 2)
        self.varint(UInt64(body.count))
        self.bytes.append(contentsOf: body)
    }

    /// The `Span` fields known when a span starts: trace_id = 1, span_id = 2, trace_state = 3,
    /// parent_span_id = 4, kind = 6, start_time_unix_nano = 7.
    mutating func spanStart(_ own: SpanContext, parentSpanID: UInt64, kind: SpanKind, start: UInt64) {
        self.idBytes(1, own.traceID.high, own.traceID.low)
        self.idBytes(2, own.spanID)
        if let state = own.traceState { self.string(3, state) }
        if parentSpanID != 0 { self.idBytes(4, parentSpanID) }
        self.uint64(6, Self.kind(kind))
        self.fixed64(7, start)
    }

    /// A `Span.events` (11) element: Event {time_unix_nano = 1, name = 2, attributes = 3}, the
    /// attributes already encoded.
    mutating func event(_ name: String, at nanoseconds: UInt64, attributes: [UInt8]) {
        self.message(11) { writer in
            writer.fixed64(1, nanoseconds)
            writer.string(2, name)
            writer.bytes.append(contentsOf: attributes)
        }
    }

    /// The `Span` fields known when it ends: name = 5, end_time_unix_nano = 8, status = 15
    /// (Status {message = 2, code = 3 (1 ok, 2 error)}).
    mutating func spanEnd(name: String, end: UInt64, status: SpanStatus?) {
        self.string(5, name)
        self.fixed64(8, end)
        if let status {
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
