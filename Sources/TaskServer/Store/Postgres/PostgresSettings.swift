import CPostgres

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the PostgreSQL store connects (`--database`, `TASKSERVER_DATABASE_URL`), checked before
/// any connection is made.
///
/// The URL is libpq's: `postgres://user:password@host:port/database?sslmode=verify-full&…`, every
/// parameter PostgreSQL documents honoured as its own clients honour it (`sslmode`, `sslrootcert`,
/// `passfile`, several hosts, `target_session_attrs`, …). A password may instead come from a file
/// (`--database-password-file`, as container secrets are mounted), from `~/.pgpass` or the file
/// named by `passfile` / `PGPASSFILE`, or from `PGPASSWORD`. The password never appears in a
/// message: `redact` removes it from anything libpq says.
public struct PostgresSettings: Sendable {
    public var url: String
    /// A password read from `--database-password-file` (it replaces one in the URL).
    public var password: String?
    /// How long one connection attempt may take (libpq's `connect_timeout`, unless the URL sets it).
    public var connectTimeoutSeconds = 10
    /// The password as written in the URL (percent-encoded), to keep it out of messages.
    private let urlPassword: String?

    /// Checks `url` (a `postgres://` or `postgresql://` URL libpq can parse); a password file's
    /// first line is the password. Throws a `PostgresError` that names the setting.
    public init(url: String, passwordFile: String? = nil) throws {
        self.url = url
        self.urlPassword = Self.passwordInURL(url)
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
            throw PostgresError(
                message: "--database must be a postgres:// or postgresql:// URL, not \(Self.shape(url))",
                connectionLost: false
            )
        }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(url, &error) else {
            let reason = error.map { String(cString: $0) } ?? "cannot be parsed"
            if let error { PQfreemem(error) }
            throw PostgresError(
                message: "--database: \(Self.redact(reason.trimmingTrailingNewlines, self.urlPassword))",
                connectionLost: false
            )
        }
        PQconninfoFree(options)
        if let passwordFile {
            guard let file = fopen(passwordFile, "r") else {
                throw PostgresError(
                    message: "--database-password-file \(passwordFile): \(String(cString: strerror(errno)))",
                    connectionLost: false
                )
            }
            defer { fclose(file) }
            var line: UnsafeMutablePointer<CChar>?
            var capacity = 0
            let length = getline(&line, &capacity, file)
            defer { free(line) }
            var password = length > 0 ? String(cString: line!) : ""
            while password.last == "\n" || password.last == "\r" { password.removeLast() }
            guard !password.isEmpty else {
                throw PostgresError(message: "--database-password-file \(passwordFile) is empty", connectionLost: false)
            }
            self.password = password
        }
    }

    /// `text` without the password (as written in the URL, decoded, or read from a file).
    public func redact(_ text: String) -> String {
        var text = Self.redact(text, self.urlPassword)
        if let password = self.password { text = Self.redact(text, password) }
        return text
    }

    /// The URL with its password replaced by `***` (for logs).
    public var redactedURL: String { Self.redact(self.url, self.urlPassword) }

    private static func redact(_ text: String, _ password: String?) -> String {
        guard let password, !password.isEmpty else { return text }
        var text = text.replacing(password, with: "***")
        if let decoded = password.percentDecoded, decoded != password {
            text = text.replacing(decoded, with: "***")
        }
        return text
    }

    /// The password between `user:` and `@` of a URL, as written.
    private static func passwordInURL(_ url: String) -> String? {
        guard let scheme = url.firstRange(of: "://") else { return nil }
        let rest = url[scheme.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        guard let at = authority.lastIndex(of: "@") else { return nil }
        let userinfo = authority[..<at]
        guard let colon = userinfo.firstIndex(of: ":") else { return nil }
        let password = String(userinfo[userinfo.index(after: colon)...])
        return password.isEmpty ? nil : password
    }

    /// What a value that is not a URL looks like, without repeating it (it may hold a secret).
    private static func shape(_ text: String) -> String {
        text.isEmpty ? "an empty value" : "a value of \(text.utf8.count) bytes"
    }
}

extension String {
    /// Decodes `%XX` escapes; nil when one is malformed.
    var percentDecoded: String? {
        var bytes: [UInt8] = []
        var iterator = self.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(Self.hexDigit), let low = iterator.next().flatMap(Self.hexDigit)
            else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
