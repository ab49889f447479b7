import TaskGraph
import Testing

@testable import TaskWorkerProtocol

/// A claim item written by the server and read by a worker.
struct ClaimItemTests {
    static let item = ClaimItem(
        leaseId: "lease_1",
        jobId: "j",
        taskId: "t",
        action: "resize",
        params: ["z": 1, "a": ["y": 2, "b": 3]],
        input: "in",
        attempt: 2,
        heartbeatTimeoutMs: 30_000,
        deadline: "2025-01-01T00:00:00.000Z"
    )

    @Test func itIsWrittenInSpecOrderAndReadBackEqual() throws {
        let text = Self.item.json.jsonString
        #expect(
            text
                == #"{"leaseId":"lease_1","jobId":"j","taskId":"t","action":"resize","params":{"z":1,"a":{"y":2,"b":3}},"#
                + #""input":"in","attempt":2,"heartbeatTimeoutMs":30000,"deadline":"2025-01-01T00:00:00.000Z"}"#
        )
        let read = try #require(ClaimItem(json: try JSONParser.parse(text)))
        #expect(read == Self.item)
        #expect(read.params.jsonString == #"{"z":1,"a":{"y":2,"b":3}}"#)
    }

    @Test func missingOptionalFieldsAreNullAndMissingRequiredOnesRefuse() throws {
        var item = Self.item
        item.deadline = nil
        #expect(!item.json.jsonString.contains("deadline"))
        let bare = try JSONParser.parse(
            #"{"leaseId":"l","jobId":"j","taskId":"t","action":"a","attempt":1,"heartbeatTimeoutMs":1000,"new":1}"#
        )
        let read = try #require(ClaimItem(json: bare))
        #expect(read.params == .null && read.input == .null && read.deadline == nil)
        for key in ["leaseId", "jobId", "taskId", "action", "attempt", "heartbeatTimeoutMs"] {
            guard case .object(var object) = bare else { return }
            object[key] = nil
            #expect(ClaimItem(json: .object(object)) == nil, "without \(key)")
        }
        #expect(ClaimItem(json: ["leaseId": 1]) == nil)
    }
}

/// The name rules shared by the server and `taskserver worker`.
struct WorkerNameTests {
    @Test(arguments: ["a", "resize", "img.resize:v2-x_y", String(repeating: "a", count: 100)])
    func validActionNames(_ name: String) { #expect(WorkerActionName.isValid(name)) }

    @Test(arguments: ["", "a b", "é", "a/b", String(repeating: "a", count: 101)])
    func invalidActionNames(_ name: String) { #expect(!WorkerActionName.isValid(name)) }

    @Test func workerIds() {
        #expect(WorkerID.isValid("host-1:42"))
        #expect(WorkerID.isValid(String(repeating: "~", count: 200)))
        #expect(!WorkerID.isValid(String(repeating: "w", count: 201)))
        #expect(!WorkerID.isValid(""))
        #expect(!WorkerID.isValid("a b"))
        #expect(!WorkerID.isValid("tab\t"))
        #expect(!WorkerID.isValid("é"))
    }
}
