import Testing

@testable import TaskServer

/// The request-target and header helpers of the HTTP layer.
struct HTTPParsingTests {
    @Test(arguments: [
        ("/v1/jobs", ["v1", "jobs"], [String: [String]]()),
        ("/v1/jobs/", ["v1", "jobs"], [:]),
        ("//v1//jobs", ["", "v1", "", "jobs"], [:]),
        // (Empty segments between slashes are kept: an empty parameter is a value its handler judges.)
        ("/v1/leases//complete", ["v1", "leases", "", "complete"], [:]),
        ("/", [], [:]),
        ("/v1/jobs/a%2Fb", ["v1", "jobs", "a/b"], [:]),
        ("/v1/jobs?limit=5&label=a:1&label=b%3A2", ["v1", "jobs"], ["limit": ["5"], "label": ["a:1", "b:2"]]),
        ("http://host:8080/v1/jobs?q=a+b", ["v1", "jobs"], ["q": ["a b"]]),
        ("/v1/é", ["v1", "é"], [:]),
    ])
    func targetsSplitIntoDecodedSegmentsAndQueryValues(
        target: String,
        segments: [String],
        query: [String: [String]]
    ) throws {
        let parsed = try #require(parseTarget(target))
        #expect(parsed.segments == segments)
        #expect(parsed.query == query)
    }

    @Test func malformedEscapesAreRejected() {
        #expect(parseTarget("/v1/jobs/%zz") == nil)
        #expect(parseTarget("/v1/jobs/%ff") == nil)
        #expect(parseTarget("/v1/jobs?x=%") == nil)
    }

    @Test func headerNamesCompareInAnyASCIICase() {
        #expect(asciiCaseInsensitiveEquals("Content-Length", "content-length"))
        #expect(asciiCaseInsensitiveEquals("CONTENT-LENGTH", "content-length"))
        #expect(asciiCaseInsensitiveEquals("100-Continue", "100-continue"))
        #expect(!asciiCaseInsensitiveEquals("content-lengths", "content-length"))
        #expect(!asciiCaseInsensitiveEquals("content_length", "content-length"))
        // Only A–Z fold: a control byte that would fold onto "-" with a blind `| 0x20` does not.
        #expect(!asciiCaseInsensitiveEquals("content\rlength", "content-length"))
        #expect(!asciiCaseInsensitiveEquals("Ĉontent-length", "content-length"))
    }
}
