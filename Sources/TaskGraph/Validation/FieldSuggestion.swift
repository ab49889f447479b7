/// "Did you mean …?" for misspelt field names.
enum FieldSuggestion {
    /// The candidate nearest to `word` within an edit distance of 2 (and less than its length).
    static func suggestion(for word: String, among candidates: [String]) -> String? {
        var best: (name: String, distance: Int)?
        let a = Array(word.utf8)
        guard a.count <= 64 else { return nil }
        for candidate in candidates {
            let b = Array(candidate.utf8)
            let distance = FieldSuggestion.editDistance(a, b)
            if distance <= 2, distance < b.count, distance < (best?.distance ?? Int.max) {
                best = (candidate, distance)
            }
        }
        return best?.name
    }

    /// The optimal-string-alignment distance (Levenshtein plus adjacent transpositions), ASCII case-insensitive.
    static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        let width = b.count + 1
        var table = [Int](repeating: 0, count: (a.count + 1) * width)
        for j in 0...b.count { table[j] = j }
        for i in 1...a.count {
            table[i * width] = i
            for j in 1...b.count {
                let cost = a[i - 1].lowercasedASCII == b[j - 1].lowercasedASCII ? 0 : 1
                var value = min(
                    table[(i - 1) * width + j] + 1,
                    table[i * width + j - 1] + 1,
                    table[(i - 1) * width + j - 1] + cost
                )
                if i > 1, j > 1, a[i - 1].lowercasedASCII == b[j - 2].lowercasedASCII,
                    a[i - 2].lowercasedASCII == b[j - 1].lowercasedASCII
                {
                    value = min(value, table[(i - 2) * width + j - 2] + 1)
                }
                table[i * width + j] = value
            }
        }
        return table[a.count * width + b.count]
    }
}
