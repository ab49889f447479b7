"""Schemathesis hooks of the contract run, loaded by `hooks` in schemathesis.toml.

A claim on an external pool with nothing queued (`POST /v1/executors/{name}/claim`) long-polls for
the whole of its body's `waitMs`, up to 60 s, and so does a completion's `claimNext.waitMs` once its
lease is known. The config can pin a query parameter (see listEvents there) but not a body field,
and hundreds of generated claims held the run for ten minutes. This hook caps such a `waitMs` at
200 ms just before each request is sent, in every phase (examples, coverage, fuzzing, stateful).
The rest of the body is sent as generated, and so is a `waitMs` the schema rejects (negative, over
60 000, not an integer): the server must still answer that with a 422.
"""

import schemathesis

# The longest a generated body may make the server wait, in milliseconds.
WAIT_MS_CAP = 200
# The schema's bound (ClaimRequest.waitMs, ClaimNext.waitMs).
WAIT_MS_MAX = 60_000
# The operations whose body may carry a `waitMs`: at the top level (a claim) or in `claimNext`.
CLAIMS = {"claimTasks"}
COMPLETIONS = {"completeLease", "completeLeases"}


def _cap(container):
    """Lowers `container["waitMs"]` to WAIT_MS_CAP when it is a schema-valid wait longer than that."""
    if not isinstance(container, dict):
        return
    wait = container.get("waitMs")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        return
    if WAIT_MS_CAP < wait <= WAIT_MS_MAX and wait == int(wait):
        container["waitMs"] = type(wait)(WAIT_MS_CAP)  # 200 or 200.0, as generated


@schemathesis.hook
def before_call(context, case, kwargs):
    operation = context.operation
    if operation is None:
        return
    operation_id = operation.definition.raw.get("operationId")
    if operation_id in CLAIMS:
        _cap(case.body)
    elif operation_id in COMPLETIONS and isinstance(case.body, dict):
        _cap(case.body.get("claimNext"))
