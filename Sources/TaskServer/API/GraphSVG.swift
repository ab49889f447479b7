import TaskGraph

/// A job's graph drawn as SVG on the server (`GET …/graph?format=svg`, SPEC §7): the dashboard's
/// picture for READMEs and tickets.
///
/// Job graphs are series-parallel trees, so the layout is one recursive pass over the node records
/// (children in registration order): series, continuations and dynamic nodes stack their children
/// top to bottom with arrows between them; parallel and map nodes put them side by side; a map (or
/// parallel) with more than `collapseOver` children is drawn as one box counting them by state.
/// Every text is XML-escaped, and the response forbids scripts (see `JobsAPI.graph`).
///
/// The dashboard draws the same tree in the browser (`Resources/ui/graph.js`, `style.css`) by the
/// same rules but not to the same numbers, on purpose: this picture is static, so every map or
/// parallel past `collapseOver` is a summary (the page collapses maps past 20 and parallels past
/// 1,000, and lets the user expand them); it has no row wrapping, compact boxes or arrow labels,
/// keeps children in record order (the page sorts map instances by index) and its sizes differ a
/// little (170×46 boxes, gaps 12/26, padding 8; the page 176×46, 14/30, 10). Colours are the same
/// hue per state in other shades: `GraphPicture.colour`, shared with the Mermaid and DOT outputs,
/// against the page's `--<state>` CSS variables.
struct GraphSVG {
    static let collapseOver = 20
    static let taskWidth = 170
    static let taskHeight = 46
    static let gap = 12
    static let arrowGap = 26
    static let header = 22
    static let padding = 8

    private let records: [NodeRecord]
    private let children: [[Int]]

    init(_ records: [NodeRecord]) {
        self.records = records
        var index: [String: Int] = [:]
        index.reserveCapacity(records.count)
        for (position, record) in records.enumerated() { index[record.id] = position }
        var children = Array(repeating: [Int](), count: records.count)
        for (position, record) in records.enumerated() {
            if let parent = record.parent, let parentIndex = index[parent] { children[parentIndex].append(position) }
        }
        self.children = children
    }

    /// A laid-out box: its size, and how to draw it at an origin.
    private struct Box {
        var width: Int
        var height: Int
        var draw: (inout [String], Int, Int) -> Void
    }

    func render() -> String {
        guard !self.records.isEmpty else { return Self.document(width: 10, height: 10, body: []) }
        let root = self.layout(0, depth: 0)
        var body: [String] = []
        root.draw(&body, Self.padding, Self.padding)
        return Self.document(width: root.width + 2 * Self.padding, height: root.height + 2 * Self.padding, body: body)
    }

    private static func document(width: Int, height: Int, body: [String]) -> String {
        var lines = [
            ##"<svg xmlns="http://www.w3.org/2000/svg" width="\##(width)" height="\##(height)" viewBox="0 0 \##(width) \##(height)" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">"##,
            ##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#6c757d"/></marker></defs>"##,
            ##"<rect width="100%" height="100%" fill="#ffffff"/>"##,
        ]
        lines += body
        lines.append("</svg>")
        return lines.joined(separator: "\n") + "\n"
    }

    private func layout(_ index: Int, depth: Int) -> Box {
        let record = self.records[index]
        let kids = self.children[index]
        if record.isTask || kids.isEmpty || depth > 200 { return self.leaf(record) }
        let horizontal = record.type == "parallel" || record.type == "map"
        if horizontal, kids.count > Self.collapseOver { return self.summary(record, kids) }
        let boxes = kids.map { self.layout($0, depth: depth + 1) }
        let spacing = horizontal ? Self.gap : Self.arrowGap
        let inner =
            horizontal
            ? (boxes.reduce(0) { $0 + $1.width } + spacing * (boxes.count - 1), boxes.map(\.height).max() ?? 0)
            : (boxes.map(\.width).max() ?? 0, boxes.reduce(0) { $0 + $1.height } + spacing * (boxes.count - 1))
        let width = max(inner.0, Self.taskWidth) + 2 * Self.padding
        let height = inner.1 + Self.header + Self.padding
        let label = "\(record.id) · \(record.type)"
        return Box(width: width, height: height) { out, x, y in
            let (fill, stroke) = GraphPicture.colour(record.state)
            out.append(
                ##"<g class="node \##(record.state.rawValue)"><rect x="\##(x)" y="\##(y)" width="\##(width)" height="\##(height)" rx="6" fill="\##(fill)" fill-opacity="0.35" stroke="\##(stroke)"/>"##
                    + ##"<text x="\##(x + 8)" y="\##(y + 15)" font-size="11" font-weight="600" fill="#343a40">\##(Self.escape(label))</text></g>"##
            )
            var cursorX = x + Self.padding
            var cursorY = y + Self.header
            for (position, box) in boxes.enumerated() {
                if horizontal {
                    box.draw(&out, cursorX, cursorY)
                    cursorX += box.width + spacing
                } else {
                    let childX = x + (width - box.width) / 2
                    box.draw(&out, childX, cursorY)
                    cursorY += box.height
                    if position < boxes.count - 1 {
                        let middle = x + width / 2
                        out.append(
                            ##"<line x1="\##(middle)" y1="\##(cursorY + 2)" x2="\##(middle)" y2="\##(cursorY + spacing - 3)" stroke="#6c757d" marker-end="url(#arrow)"/>"##
                        )
                        cursorY += spacing
                    }
                }
            }
        }
    }

    private func leaf(_ record: NodeRecord) -> Box {
        let kind = record.action.map { "\(record.type): \($0)" } ?? record.type
        let detail =
            "\(kind) · \(record.state.rawValue)" + (record.attempts > 1 ? " · \(record.attempts) attempts" : "")
        return Box(width: Self.taskWidth, height: Self.taskHeight) { out, x, y in
            let (fill, stroke) = GraphPicture.colour(record.state)
            out.append(
                ##"<g class="node \##(record.state.rawValue)"><rect x="\##(x)" y="\##(y)" width="\##(Self.taskWidth)" height="\##(Self.taskHeight)" rx="6" fill="\##(fill)" stroke="\##(stroke)" stroke-width="1.5"/>"##
                    + ##"<text x="\##(x + 8)" y="\##(y + 19)" font-weight="600" fill="#212529">\##(Self.escape(Self.clip(record.id, 24)))</text>"##
                    + ##"<text x="\##(x + 8)" y="\##(y + 36)" font-size="11" fill="#495057">\##(Self.escape(Self.clip(detail, 28)))</text></g>"##
            )
        }
    }

    /// Many instances or branches as one box: how many, and how many in each state.
    private func summary(_ record: NodeRecord, _ kids: [Int]) -> Box {
        var counts: [NodeState: Int] = [:]
        for kid in kids { counts[self.records[kid].state, default: 0] += 1 }
        let parts = NodeState.allCases.compactMap { state in counts[state].map { "\($0) \(state.rawValue)" } }
        let width = 2 * Self.taskWidth
        let height = Self.taskHeight + Self.header
        let noun = record.type == "map" ? "instances" : "branches"
        return Box(width: width, height: height) { out, x, y in
            let (fill, stroke) = GraphPicture.colour(record.state)
            var line =
                ##"<g class="node \##(record.state.rawValue)"><rect x="\##(x)" y="\##(y)" width="\##(width)" height="\##(height)" rx="6" fill="\##(fill)" stroke="\##(stroke)" stroke-width="1.5"/>"##
                + ##"<text x="\##(x + 8)" y="\##(y + 17)" font-weight="600" fill="#212529">\##(Self.escape(Self.clip("\(record.id) · \(record.type)", 48)))</text>"##
                + ##"<text x="\##(x + 8)" y="\##(y + 35)" font-size="11" fill="#495057">\##(kids.count) \##(noun)</text>"##
            // A bar of the states, in proportion.
            var barX = x + 8
            let barWidth = width - 16
            for state in NodeState.allCases {
                guard let count = counts[state] else { continue }
                let segment = max(1, barWidth * count / kids.count)
                line +=
                    ##"<rect x="\##(barX)" y="\##(y + 44)" width="\##(segment)" height="6" fill="\##(GraphPicture.colour(state).stroke)"/>"##
                barX += segment
            }
            line +=
                ##"<text x="\##(x + 8)" y="\##(y + 63)" font-size="11" fill="#495057">\##(Self.escape(parts.joined(separator: ", ")))</text></g>"##
            out.append(line)
        }
    }

    private static func clip(_ text: String, _ limit: Int) -> String {
        text.count <= limit ? text : String(text.prefix(limit - 1)) + "…"
    }

    /// XML text and attribute escaping.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default:
                // Characters XML 1.0 forbids (controls other than tab, newline, return) are dropped.
                if character.value < 0x20, character != "\t", character != "\n", character != "\r" { continue }
                out.unicodeScalars.append(character)
            }
        }
        return out
    }
}
