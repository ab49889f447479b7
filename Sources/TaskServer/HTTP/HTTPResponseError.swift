import NIOHTTP1

/// An error that knows how it is answered over HTTP.
///
/// Handlers may throw any error: one that conforms is answered with its problem, any other is a
/// bug and becomes a generic 500 whose detail never carries internal text (the error is logged).
/// Lower layers keep their own error types and gain a conformance here, in the HTTP layer.
public protocol HTTPResponseError: Error {
    /// The `application/problem+json` answer for this error.
    var problem: HTTPProblem { get }
}

extension HTTPProblem: HTTPResponseError {
    public var problem: HTTPProblem { self }
}

extension StoreError: HTTPResponseError {
    /// Every store error is transient: a `503` the client may retry (codes `store.busy` and
    /// `store.unavailable`, as openapi.yaml lists them).
    public var problem: HTTPProblem {
        switch self {
        case .busy:
            return HTTPProblem(
                .serviceUnavailable,
                code: "store.busy",
                detail: "the store is behind on writes; retry shortly"
            )
        case .writeFailed:
            return HTTPProblem(
                .serviceUnavailable,
                code: "store.unavailable",
                detail: "the job could not be stored; retry shortly"
            )
        case .unavailable:
            return HTTPProblem(
                .serviceUnavailable,
                code: "store.unavailable",
                detail: "the database cannot be reached; retry shortly"
            )
        default:
            return HTTPProblem(
                .serviceUnavailable,
                code: "store.unavailable",
                detail: "the store could not be read; retry shortly"
            )
        }
    }
}
