import Testing

@testable import TaskGraph

/// A test field: `"urgency": {"level": 0…9}`. Its value records the pointer it was given.
private struct PriorityField: JobField {
    struct Priority: Sendable, Equatable {
        var level: Int
        var pointer: String
    }

    var name: String { "urgency" }

    func decode(_ value: JSONValue, at pointer: String) throws(ValidationError) -> Priority {
        guard case .object(let object) = value else {
            throw ValidationError([ValidationProblem(pointer: pointer, message: "must be an object")])
        }
        var problems: [ValidationProblem] = []
        for member in object.members where member.key != "level" {
            problems.append(
                ValidationProblem(pointer: JSONPointer.appending(pointer, member.key), message: "unexpected")
            )
        }
        guard let level = object["level"]?.intValue, (0...9).contains(level) else {
            problems.append(ValidationProblem(pointer: pointer + "/level", message: "must be an integer from 0 to 9"))
            throw ValidationError(problems)
        }
        if !problems.isEmpty { throw ValidationError(problems) }
        return Priority(level: level, pointer: pointer)
    }
}

/// A second field, of another type, that accepts any string.
private struct OwnerField: JobField {
    var name: String { "owner" }

    func decode(_ value: JSONValue, at pointer: String) throws(ValidationError) -> String {
        guard case .string(let text) = value else {
            throw ValidationError([ValidationProblem(pointer: pointer, message: "must be a string")])
        }
        return text
    }
}

private let decoder = JobDecoder(actions: .builtins, executors: ["default"], fields: [PriorityField(), OwnerField()])
private let task: JSONValue = ["type": "task", "action": "value"]

/// The problems `decoder` reports for `json`, as `pointer: message` lines; empty when it is valid.
private func problems(_ json: JSONValue, with decoder: JobDecoder = decoder) -> [String] {
    do {
        _ = try decoder.decodeJob(json)
        return []
    } catch {
        return error.problems.map { "\($0.pointer): \($0.message)" }
    }
}

struct JobFieldTests {
    @Test
    func theFieldDecodesItsValueAtItsPointerAndTheSpecKeepsItTyped() throws {
        let spec = try decoder.decodeJob(["graph": task, "urgency": ["level": 3], "owner": "data"])
        #expect(spec.fields[PriorityField.self] == PriorityField.Priority(level: 3, pointer: "/urgency"))
        #expect(spec.fields[OwnerField.self] == "data")
    }

    @Test
    func anAbsentFieldHasNoValue() throws {
        let spec = try decoder.decodeJob(["graph": task])
        #expect(spec.fields[PriorityField.self] == nil)
        #expect(spec.fields.isEmpty)
    }

    @Test
    func specsCompareTheirFieldValues() throws {
        let a = try decoder.decodeJob(["graph": task, "urgency": ["level": 3]])
        let b = try decoder.decodeJob(["graph": task, "urgency": ["level": 3]])
        let c = try decoder.decodeJob(["graph": task, "urgency": ["level": 4]])
        let d = try decoder.decodeJob(["graph": task, "owner": "x"])
        #expect(a == b)
        #expect(a != c)
        #expect(a != d)
        var values = JobFieldValues()
        values[OwnerField.self] = "x"
        #expect(d.fields == values)
    }

    @Test
    func theFieldsProblemsComeBackAtTheirPointersBetweenLabelsAndGraph() {
        let json: JSONValue = [
            "graph": ["type": "task"],
            "urgency": ["level": 12, "colour": "red"],
            "labels": ["bad key": "x"],
            "owner": 5,
        ]
        #expect(
            problems(json) == [
                #"/labels/bad key: invalid label name "bad key": use 1 to 63 letters, digits, '_', '.' or '-'"#,
                "/urgency/colour: unexpected",
                "/urgency/level: must be an integer from 0 to 9",
                "/owner: must be a string",
                "/graph/action: required",
            ]
        )
    }

    @Test
    func nullIsHandedToTheField() {
        #expect(problems(["graph": task, "urgency": nil]) == ["/urgency: must be an object"])
    }

    @Test
    func theFieldsNamesAreKnownAndSuggested() {
        #expect(
            problems(["graph": task, "urgenc": ["level": 1]]) == [
                #"/urgenc: unknown field "urgenc"; did you mean "urgency"?"#
            ]
        )
        #expect(
            problems(
                ["graph": task, "urgency": ["level": 1]],
                with: JobDecoder(actions: .builtins, executors: ["default"])
            ) == [
                #"/urgency: unknown field "urgency""#
            ]
        )
    }

    @Test
    func anEngineDecodesItsConfiguredFields() throws {
        let engine = Engine(configuration: EngineConfiguration(executors: ["default": 1], jobFields: [OwnerField()]))
        defer { engine.shutdown() }
        #expect(try engine.decoder.decodeJob(["graph": task, "owner": "ops"]).fields[OwnerField.self] == "ops")
    }
}
