/// Writes compact JSON straight to bytes.
///
/// For the representations written on every request (a job after `POST /v1/jobs`, a page of a
/// list, a webhook payload): building a `JSONValue` tree first and serializing it cost about as
/// much again as writing the bytes. Commas are placed by the writer. Field names are
/// `StaticString`s written as they are; keys that come from data go through `escapedKey`.
///
/// ```swift
/// var json = JSONWriter()
/// json.beginObject()
/// json.key("id"); json.string(id)
/// json.key("attempts"); json.int(2)
/// json.endObject()
/// ```
public struct JSONWriter {
    public private(set) var bytes: [UInt8]
    /// Whether the next member or element is the first of its container (no comma before it).
    private var atStart = true

    public init(capacity: Int = 256) {
        self.bytes = []
        self.bytes.reserveCapacity(capacity)
    }

    public mutating func beginObject() {
        self.separate()
        self.bytes.append(UInt8(ascii: "{"))
        self.atStart = true
    }

    public mutating func endObject() {
        self.bytes.append(UInt8(ascii: "}"))
        self.atStart = false
    }

    public mutating func beginArray() {
        self.separate()
        self.bytes.append(UInt8(ascii: "["))
        self.atStart = true
    }

    public mutating func endArray() {
        self.bytes.append(UInt8(ascii: "]"))
        self.atStart = false
    }

    /// A member's key; its value comes next. `name` must need no escaping (our own field names).
    public mutating func key(_ name: StaticString) {
        self.separate()
        self.bytes.append(UInt8(ascii: "\""))
        JSONValue.writeLiteral(name, into: &self.bytes)
        self.bytes.append(UInt8(ascii: "\""))
        self.bytes.append(UInt8(ascii: ":"))
        self.atStart = true
    }

    /// A member's key that comes from data (escaped as needed). Named apart from `key(_:)`: with
    /// one name, a string literal would pick the `String` overload and every field name would be
    /// scanned for escapes.
    public mutating func escapedKey(_ key: String) {
        self.separate()
        JSONValue.writeString(key, into: &self.bytes)
        self.bytes.append(UInt8(ascii: ":"))
        self.atStart = true
    }

    public mutating func string(_ value: String) {
        self.separate()
        JSONValue.writeString(value, into: &self.bytes)
    }

    public mutating func int(_ value: Int) {
        self.separate()
        JSONValue.writeInt(value, into: &self.bytes)
    }

    public mutating func null() {
        self.separate()
        JSONValue.writeNull(into: &self.bytes)
    }

    /// A timestamp as its RFC 3339 string.
    public mutating func timestamp(_ value: Timestamp) {
        self.separate()
        self.bytes.append(UInt8(ascii: "\""))
        value.appendRFC3339(to: &self.bytes)
        self.bytes.append(UInt8(ascii: "\""))
    }

    public mutating func value(_ value: JSONValue) {
        self.separate()
        value.write(into: &self.bytes)
    }

    /// A value already encoded as compact JSON (written by another `JSONWriter`).
    public mutating func encoded(_ json: [UInt8]) {
        self.separate()
        self.bytes.append(contentsOf: json)
    }

    private mutating func separate() {
        if self.atStart {
            self.atStart = false
        } else {
            self.bytes.append(UInt8(ascii: ","))
        }
    }
}
