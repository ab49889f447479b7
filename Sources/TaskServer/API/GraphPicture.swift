import TaskGraph

/// A job's graph as Mermaid or Graphviz DOT text, nodes coloured by state (`GET …/graph`).
enum GraphPicture {
    static func colour(_ state: NodeState) -> (fill: String, stroke: String) {
        switch state {
        case .pending: return ("#eeeeee", "#999999")
        case .running: return ("#cfe2ff", "#0d6efd")
        case .succeeded: return ("#d1e7dd", "#198754")
        case .failed: return ("#f8d7da", "#dc3545")
        case .cancelled: return ("#fff3cd", "#fd7e14")
        case .skipped: return ("#f8f9fa", "#adb5bd")
        }
    }

    private static func label(_ node: NodeRecord) -> String {
        let kind = node.action.map { "\(node.type): \($0)" } ?? node.type
        return "\(node.id)\\n\(kind)\\n\(node.state.rawValue)"
    }

    /// Mermaid `flowchart TD`: one node per record, an edge from each parent, a class per state.
    static func mermaid(_ nodes: [NodeRecord]) -> String {
        var ids: [String: String] = [:]
        for (index, node) in nodes.enumerated() { ids[node.id] = "n\(index)" }
        var lines = ["flowchart TD"]
        for (index, node) in nodes.enumerated() {
            let text = label(node).replacingOccurrences(of: "\"", with: "#quot;").replacingOccurrences(
                of: "\\n",
                with: "<br/>"
            )
            lines.append("    n\(index)[\"\(text)\"]:::\(node.state.rawValue)")
        }
        for node in nodes {
            if let parent = node.parent, let from = ids[parent], let to = ids[node.id] {
                lines.append("    \(from) --> \(to)")
            }
        }
        for state in NodeState.allCases {
            let (fill, stroke) = colour(state)
            lines.append("    classDef \(state.rawValue) fill:\(fill),stroke:\(stroke)")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Graphviz `digraph`: filled boxes coloured by state.
    static func dot(_ nodes: [NodeRecord], name: String) -> String {
        func quote(_ text: String) -> String {
            "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
        }
        var lines = [
            "digraph \(quote(name)) {", "    rankdir=TB;",
            "    node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];",
        ]
        for node in nodes {
            let (fill, stroke) = colour(node.state)
            let text = "\(node.id)\n\(node.action.map { "\(node.type): \($0)" } ?? node.type)\n\(node.state.rawValue)"
            lines.append("    \(quote(node.id)) [label=\(quote(text)), fillcolor=\"\(fill)\", color=\"\(stroke)\"];")
        }
        for node in nodes {
            if let parent = node.parent { lines.append("    \(quote(parent)) -> \(quote(node.id));") }
        }
        lines.append("}")
        return lines.joined(separator: "\n") + "\n"
    }
}

extension String {
    /// Literal substring replacement (no Foundation).
    func replacingOccurrences(of target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var result = ""
        var index = self.startIndex
        while index < self.endIndex {
            if self[index...].hasPrefix(target) {
                result += replacement
                index = self.index(index, offsetBy: target.count)
            } else {
                result.append(self[index])
                index = self.index(after: index)
            }
        }
        return result
    }
}
