extension String {
    /// Whether the string has at most `limit` characters, counted as JSON Schema's `maxLength`
    /// counts them — Unicode code points, not grapheme clusters — so the server and openapi.yaml
    /// agree on every length limit (a name, a label value, a webhook secret). The UTF-8 length is
    /// tried first: for ASCII text it is the answer, without walking the scalars.
    package func hasAtMost(codePoints limit: Int) -> Bool {
        self.utf8.count <= limit || self.unicodeScalars.count <= limit
    }
}
