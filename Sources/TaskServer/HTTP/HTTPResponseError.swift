import NIOHTTP1
import TaskGraph

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
                detail: "the change could not be stored; retry shortly"
            )
        case .unavailable:
            return HTTPProblem(
                .serviceUnavailable,
                code: "store.unavailable",
                detail: "the database cannot be reached; retry shortly"
            )
        case .notYetDurable:
            // Kept in the journal: it commits once the store can again.
            return HTTPProblem(
                .serviceUnavailable,
                code: "store.unavailable",
                detail: "the store could not commit the change in time; it is kept and may still apply; "
                    + "retry shortly (a submission with the same Idempotency-Key)"
            )
        case .ownerUnavailable:
            // The command stays recorded: the job's next owner applies it when it takes the job
            // over, so a retry may find it done (a lease completed: `409 lease.gone`).
            return HTTPProblem(
                .serviceUnavailable,
                code: "store.unavailable",
                detail: "the server running this job did not answer in time; the change may still apply; retry shortly"
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

extension JobAbandoned: HTTPResponseError {
    /// The server gave the job up to another server of the cluster while the request waited: the
    /// change may or may not be recorded, and the other server answers from now on.
    public var problem: HTTPProblem {
        HTTPProblem(
            .serviceUnavailable,
            code: "store.unavailable",
            detail: "another server took this job over; retry shortly"
        )
    }
}
