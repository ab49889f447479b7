import Testing

@testable import TaskServer

/// The server's HTTP syntax: the URL authority parser that `isHTTPURL` and `OutboundURL` share.
/// (Which URLs jobs may use is asserted, with its messages, in WebhookFieldTests and HTTPActionTests.)
struct HTTPSyntaxTests {
    /// schemeEnd, start, end and hostStart.
    static func parts(_ authority: HTTPSyntax.URLAuthority) -> [Int] {
        [authority.schemeEnd, authority.start, authority.end, authority.hostStart]
    }

    @Test
    func theAuthorityParserFindsSchemeUserinfoHostAndPort() throws {
        let url = "HTTPS://user:p%40ss@Hooks.Example:8443/x?y=1#z"
        let authority = try #require(HTTPSyntax.URLAuthority(Array(url.utf8)))
        #expect(Self.parts(authority) == [5, 8, 38, 20])
        #expect(HTTPSyntax.URLAuthority(Array("http://h?x/y".utf8)).map(Self.parts) == [4, 7, 8, 7])
        #expect(HTTPSyntax.URLAuthority(Array("http://".utf8)).map(Self.parts) == [4, 7, 7, 7])
    }

    @Test(arguments: ["", "example.com", "://host", "http:/x", "mailto:a@b.c", "http:"])
    func aURLWithoutSchemeAndSlashesHasNoAuthority(url: String) {
        #expect(HTTPSyntax.URLAuthority(Array(url.utf8)) == nil)
    }

    @Test
    func outboundURLsKeepTheParserResultsWithoutCredentials() throws {
        let url = try #require(OutboundURL("HTTPS://user:p%40ss@Hooks.Example:8443/x?y=1#z"))
        #expect(url.scheme == "https")
        #expect(url.hostAndPort == "hooks.example:8443")
        #expect(url.redacted == "HTTPS://Hooks.Example:8443/x?y=1#z")
        #expect(url.origin == "https://hooks.example:8443")
        #expect(OutboundURL("http://[::1]/p")?.origin == "http://[::1]:80")
        #expect(OutboundURL("https://a@b@host")?.redacted == "https://host")
        #expect(OutboundURL("no scheme") == nil)
    }

    @Test
    func aSchemeEndsAtTheFirstColonSlashSlash() {
        // Not http: a ':' before "://" belongs to the scheme, which http and https never have.
        #expect(!HTTPSyntax.isHTTPURL("http:x://host"))
        #expect(OutboundURL("http:x://host")?.scheme == "http:x")
        #expect(HTTPSyntax.isHTTPURL("http://host:8080"))
    }
}
