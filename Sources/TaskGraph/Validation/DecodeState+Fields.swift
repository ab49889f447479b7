extension DecodeState {
    // MARK: Scalars

    /// Whether `text` has at most `limit` characters (counted only when its UTF-8 form is longer).
    static func fits(_ text: String, _ limit: Int) -> Bool {
        text.utf8.count <= limit || text.count <= limit
    }

    // MARK: Job fields

    /// The job's `labels` (see the file comment of JobDecoder.swift for the rules).
    mutating func decodeLabels(_ value: JSONValue) -> [String: String] {
        guard case .object(let object) = value else {
            self.report(pointer: "/labels", "must be an object")
            return [:]
        }
        if object.count > 64 {
            self.report(pointer: "/labels", "must have at most 64 labels")
        }
        var labels: [String: String] = [:]
        labels.reserveCapacity(object.count)
        for member in object.members {
            let key = member.key
            let nameOK =
                !key.utf8.isEmpty && key.utf8.count <= 63
                && key.utf8.allSatisfy { byte in
                    TemplateSyntax.isNameByte(byte) || byte == UInt8(ascii: ".")
                }
            if !nameOK {
                self.report(
                    pointer: "/labels/" + JSONValue.escapePointerToken(key),
                    "invalid label name \(TemplateExpression.quoted(key)): use 1 to 63 letters, digits, '_', '.' or '-'"
                )
                continue
            }
            guard case .string(let text) = member.value else {
                self.report(pointer: "/labels/" + key, "must be a string")
                continue
            }
            if !DecodeState.fits(text, 200) {
                self.report(pointer: "/labels/" + key, "must be at most 200 characters")
                continue
            }
            labels[key] = text
        }
        return labels
    }
}
