import Foundation
import TestSupport
import Testing

@testable import TaskGraph

/// The byte-level writers behind the job representation: `JSONWriter`, integer digits and
/// RFC 3339 timestamps, each checked against an independent implementation.
struct JSONWriterTests {
    @Test func commasGoBetweenMembersAndElementsAtEveryDepth() throws {
        var json = JSONWriter()
        json.beginObject()
        json.key("a")
        json.int(1)
        json.key("list")
        json.beginArray()
        json.int(1)
        json.beginObject()
        json.endObject()
        json.beginArray()
        json.endArray()
        json.string("x")
        json.null()
        json.endArray()
        json.key("empty")
        json.beginObject()
        json.endObject()
        json.escapedKey("data key \"quoted\"")
        json.value(["k": [true, false, 1.5]])
        json.key("raw")
        json.encoded(Array(#"{"x":[1]}"#.utf8))
        json.endObject()
        let text = String(decoding: json.bytes, as: UTF8.self)
        #expect(
            text
                == #"{"a":1,"list":[1,{},[],"x",null],"empty":{},"data key \"quoted\"":{"k":[true,false,1.5]},"raw":{"x":[1]}}"#
        )
        let expected: JSONValue = [
            "a": 1, "list": [1, [:], [], "x", nil], "empty": [:], "data key \"quoted\"": ["k": [true, false, 1.5]],
            "raw": ["x": [1]],
        ]
        #expect(try JSONParser.parse(text) == expected)
    }

    @Test func integersMatchTheirDescription() {
        var generator = SplitMix64(seed: 7)
        var values = [0, 1, -1, 9, 10, -10, 99, 100, Int.max, Int.min, Int.max - 1, Int.min + 1]
        for _ in 0..<2000 {
            let bits = Int(generator.next() % 64)
            values.append(Int(truncatingIfNeeded: generator.next()) >> bits)
        }
        for value in values {
            var out: [UInt8] = []
            JSONValue.writeInt(value, into: &out)
            #expect(String(decoding: out, as: UTF8.self) == String(value))
        }
    }

    @Test func stringsAreEscapedOnlyWhereJSONRequires() {
        let cases: [(String, String)] = [
            ("", #""""#),
            ("plain ascii", #""plain ascii""#),
            ("quote \" backslash \\ slash /", #""quote \" backslash \\ slash /""#),
            ("tab\tnewline\ncr\rbell\u{07}", #""tab\tnewline\ncr\rbell\u0007""#),
            ("é 💥 日本", "\"é 💥 日本\""),
            (
                String(repeating: "long enough to live on the heap ", count: 4),
                "\"" + String(repeating: "long enough to live on the heap ", count: 4) + "\""
            ),
        ]
        for (value, expected) in cases {
            var json = JSONWriter()
            json.string(value)
            #expect(String(decoding: json.bytes, as: UTF8.self) == expected)
        }
        // A bridged or otherwise non-contiguous string takes the slow path and says the same.
        let bridged = NSString(string: "ab\"c").description
        var json = JSONWriter()
        json.string(bridged)
        #expect(String(decoding: json.bytes, as: UTF8.self) == #""ab\"c""#)
    }

    @Test func timestampsMatchFoundationsISO8601Formatter() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        var generator = SplitMix64(seed: 42)
        // The epoch, leap days, year ends, and random instants from 1970 to 9999.
        var instants: [Int64] = [
            0, 951_782_400_000, 951_868_799_999, 1_709_164_800_123, 4_102_444_799_999, 253_402_300_799_999,
        ]
        for _ in 0..<2000 { instants.append(Int64(generator.next() % 253_402_300_800_000)) }
        for ms in instants {
            let timestamp = Timestamp(milliseconds: ms)
            let expected = formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000 + 0.0000001))
            #expect(timestamp.rfc3339 == expected, "at \(ms) ms")
            var bytes: [UInt8] = [UInt8(ascii: "x")]
            timestamp.appendRFC3339(to: &bytes)
            #expect(bytes == [UInt8(ascii: "x")] + Array(expected.utf8))
        }
    }

    @Test func aJobSnapshotWritesEveryFieldInOrder() throws {
        let snapshot = JobSnapshot(
            id: "j1",
            name: "n",
            state: .succeeded,
            input: ["post": 1],
            result: ["ok": true],
            labels: ["team": "data", "env": "prod"],
            createdAt: Timestamp(milliseconds: 0),
            startedAt: Timestamp(milliseconds: 1),
            finishedAt: Timestamp(milliseconds: 1002),
            progress: JobProgress(),
            lastEventSeq: 4
        )
        let text = String(decoding: snapshot.jsonBytes(), as: UTF8.self)
        #expect(
            text
                == #"{"id":"j1","name":"n","state":"succeeded","input":{"post":1},"result":{"ok":true},"labels":{"env":"prod","team":"data"},"#
                + #""createdAt":"1970-01-01T00:00:00.000Z","startedAt":"1970-01-01T00:00:00.001Z","finishedAt":"1970-01-01T00:00:01.002Z","#
                + #""progress":{"total":0,"pending":0,"running":0,"succeeded":0,"failed":0,"cancelled":0,"skipped":0}}"#
        )
        let listed = String(decoding: snapshot.jsonBytes(includePayloads: false), as: UTF8.self)
        #expect(!listed.contains("input") && !listed.contains("result"))
        #expect(try JSONParser.parse(listed)["labels"] == ["env": "prod", "team": "data"])
    }
}
