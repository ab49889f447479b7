"""A tour of TaskServer through a client generated from openapi.yaml by openapi-python-client.

scripts/check-generated-client.sh generates the client (package `taskserver_client`), installs it
and runs this against a live server:  python3 scripts/client-tour.py BASE_URL

Everything goes through the generated operations and models, as a new user's code would: submit
and wait, an `await` task completed over HTTP, a job list read page by page with its cursor, a
cancellation, the events of a job (typed `data`), retries with the documented defaults, typed error
details, and the 404 / 409 / 422 problems read through the `Problem` model (`code`,
`errors[].pointer`). Every step checks what it got; the first wrong answer ends the tour with
status 1.
"""

import sys
import time
import uuid
from typing import Any

import httpx
import yaml  # PyYAML (scripts/requirements.txt)

from taskserver_client import Client
from taskserver_client.api.events import list_events
from taskserver_client.api.graphs import get_job_graph, validate_job
from taskserver_client.api.jobs import cancel_job, delete_job, get_job, list_jobs, submit_job
from taskserver_client.api.service import get_health, get_open_api_json, get_readiness, list_executors
from taskserver_client.api.tasks import cancel_task, complete_task, get_task, list_tasks
from taskserver_client.models import (
    AggregateErrorDetails,
    CompletionError,
    CompleteWithError,
    CompleteWithResult,
    ContinuationNode,
    ContinuationNodeOn,
    Event,
    EventType,
    HTTPStatusErrorDetails,
    Job,
    JobList,
    JobState,
    JobSubmission,
    Labels,
    MapNode,
    NodeState,
    ParallelNode,
    Problem,
    ProblemCode,
    Ready,
    RetryPolicy,
    SeriesNode,
    TaskError,
    TaskNode,
    TaskNodeParams,
    TaskNodeState,
    TaskRetryingData,
    ValidationResult,
)
from taskserver_client.types import UNSET, Response

if len(sys.argv) != 2:
    sys.exit("usage: client-tour.py BASE_URL")
BASE_URL = sys.argv[1].rstrip("/")
# Long polls hold a response for up to `waitMs`; the generated client's default timeout is 5 s.
client = Client(base_url=BASE_URL, timeout=httpx.Timeout(70.0))
RUN = uuid.uuid4().hex[:12]  # labels this run's jobs, so a shared server's other jobs do not count
checks = 0


class TourFailure(Exception):
    pass


def check(condition: bool, what: str, got: Any = None) -> None:
    global checks
    checks += 1
    if not condition:
        raise TourFailure(what + ("" if got is None else f"; got: {got!r}"))


def expect(response: Response[Any], status: int, model: type, what: str) -> Any:
    """The parsed body of `response`, which must have `status` and parse as `model`."""
    body = response.content.decode("utf-8", "replace")[:600]
    check(response.status_code == status, f"{what}: status {status}", f"{int(response.status_code)} {body}")
    check(isinstance(response.parsed, model), f"{what}: body parsed as {model.__name__}", response.parsed)
    return response.parsed


def expect_problem(response: Response[Any], status: int, code: str, what: str) -> Problem:
    """The `Problem` of an error response, read through the generated model."""
    problem = expect(response, status, Problem, what)
    check(response.headers.get("content-type") == "application/problem+json", f"{what}: problem+json",
          response.headers.get("content-type"))
    check(problem.code == ProblemCode(code), f"{what}: code {code}", problem.code)
    check(problem.status == status, f"{what}: status {status} repeated in the body", problem.status)
    check(isinstance(problem.title, str) and problem.title != "", f"{what}: a title", problem.title)
    return problem


def task(action: str, params: dict | None = None, **fields: Any) -> TaskNode:
    return TaskNode(type_="task", action=action, params=TaskNodeParams.from_dict(params or {}), **fields)


def labelled(**labels: str) -> Labels:
    return Labels.from_dict({"tour": RUN, **labels})


def submit(graph: Any, what: str, wait_ms: int = 0, **fields: Any) -> Job:
    response = submit_job.sync_detailed(client=client, body=JobSubmission(graph=graph, **fields), wait_ms=wait_ms)
    job = expect(response, 201, Job, what)
    check(response.headers.get("location") == f"/v1/jobs/{job.id}", f"{what}: Location", response.headers.get("location"))
    return job


def wait_for_job(job_id: str, what: str) -> Job:
    """The job once it has ended (long polls of 10 s, 60 s in all)."""
    deadline = time.monotonic() + 60
    while True:
        job = expect(get_job.sync_detailed(job_id, client=client, wait_ms=10_000), 200, Job, what)
        if job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED) or time.monotonic() > deadline:
            return job


def wait_for_task(job_id: str, task_id: str, state: NodeState, what: str) -> TaskNodeState:
    deadline = time.monotonic() + 10
    while True:
        node = expect(get_task.sync_detailed(job_id, task_id, client=client), 200, TaskNodeState, what)
        if node.state == state:
            return node
        check(time.monotonic() < deadline, f"{what}: task {task_id} reaches {state.value}", node.state)
        time.sleep(0.02)


def events_of(job_id: str, what: str, after: int = 0) -> list[Event]:
    body = expect(list_events.sync_detailed(job_id, client=client, after=after), 200, object, what)
    return list(body.items)


def step(title: str) -> None:
    print(f"· {title}", flush=True)


def tour() -> None:
    step("service: health, readiness, executors, the document as JSON")
    expect(get_health.sync_detailed(client=client), 200, object, "GET /healthz")
    ready = expect(get_readiness.sync_detailed(client=client), 200, Ready, "GET /readyz")
    check(ready.status == "ready", "readyz: status ready", ready.status)
    executors = expect(list_executors.sync_detailed(client=client), 200, object, "GET /v1/executors")
    names = [executor.name for executor in executors.items]
    check("default" in names and "immediate" in names, "executors: default and immediate exist", names)
    check(names == sorted(names), "executors: sorted by name", names)
    document = get_open_api_json.sync_detailed(client=client)
    check(document.status_code == 200, "GET /openapi.json: 200", int(document.status_code))
    check(document.headers.get("content-type", "").startswith("application/json"), "GET /openapi.json: JSON",
          document.headers.get("content-type"))
    check(str(document.parsed.openapi).startswith("3.1."), "GET /openapi.json: an OpenAPI 3.1 document",
          document.parsed.openapi)
    spec_version = document.parsed["info"]["version"]
    yaml_text = httpx.get(BASE_URL + "/openapi.yaml", timeout=10).text
    check(f"\n  version: {spec_version}\n" in yaml_text, "openapi.json and openapi.yaml carry the same version",
          spec_version)
    # The server serves openapi.json as committed (generated from openapi.yaml by
    # scripts/openapi-json.py): it must be exactly what PyYAML reads from the YAML it serves.
    served_json = httpx.get(BASE_URL + "/openapi.json", timeout=10).json()
    check(served_json == yaml.safe_load(yaml_text), "openapi.json is openapi.yaml as PyYAML reads it",
          "they differ")

    step("submit and wait (waitMs): a series of two value tasks")
    job = submit(
        SeriesNode(type_="series", steps=[
            task("value", {"value": {"id": "${input.post}", "comments": 3}}, id="fetch"),
            task("value", {"value": "${input.comments}"}, id="count"),
        ]),
        "POST /v1/jobs?waitMs", wait_ms=5000, name="tour-submit", input_={"post": 123},
        labels=labelled(step="submit"),
    )
    check(job.state == JobState.SUCCEEDED, "submit and wait: succeeded", job.state)
    check(job.result == 3, "submit and wait: result 3", job.result)
    check(job.progress.total == 2 and job.progress.succeeded == 2, "progress: 2 of 2 succeeded", job.progress.to_dict())
    check(job.name == "tour-submit" and job.labels["step"] == "submit", "name and labels kept", job.to_dict())
    check(job.finished_at is not UNSET and job.started_at is not UNSET, "startedAt and finishedAt set", job.to_dict())
    check(job.error is UNSET, "no error on a job that succeeded", job.error)
    fetch = expect(get_task.sync_detailed(job.id, "fetch", client=client), 200, TaskNodeState, "GET task fetch")
    check(fetch.result == {"id": 123, "comments": 3}, "task fetch: its result", fetch.result)
    check(fetch.attempts == 1 and fetch.executor == "default", "task fetch: one attempt on `default`", fetch.to_dict())

    step("idempotent submission: the same key and body → 200 and the same job; another body → 422")
    key = f"tour-{RUN}"
    body = JobSubmission(graph=task("value", {"value": 1}), labels=labelled(step="idempotency"))
    first = expect(submit_job.sync_detailed(client=client, body=body, idempotency_key=key), 201, Job, "first submission")
    again = expect(submit_job.sync_detailed(client=client, body=body, idempotency_key=key), 200, Job, "repeat")
    check(again.id == first.id, "repeat: the same job", (first.id, again.id))
    other = JobSubmission(graph=task("value", {"value": 2}), labels=labelled(step="idempotency"))
    expect_problem(submit_job.sync_detailed(client=client, body=other, idempotency_key=key), 422,
                   "idempotency.mismatch", "same key, other body")

    step("an await task completed through the client, then 409s on the completed and on a value task")
    job = submit(
        SeriesNode(type_="series", steps=[
            task("await", {"timeoutMs": 600_000}, id="approve"),
            task("value", {"value": {"approved": "${input.approved}", "by": "${tasks.approve.result.by}"}}, id="after"),
        ]),
        "submit an await job", labels=labelled(step="await"),
    )
    wait_for_task(job.id, "approve", NodeState.RUNNING, "await task")
    nodes = expect(list_tasks.sync_detailed(job.id, client=client), 200, object, "GET tasks").items
    check([(node.id, node.state) for node in nodes]
          == [("root", NodeState.RUNNING), ("approve", NodeState.RUNNING), ("after", NodeState.PENDING)],
          "tasks: root and approve running, after pending", [(node.id, node.state) for node in nodes])
    check(nodes[0].id == "root" and nodes[0].parent is UNSET and nodes[1].parent == "root", "tasks: parents first", [n.to_dict() for n in nodes])
    completed = complete_task.sync_detailed(job.id, "approve", client=client,
                                            body=CompleteWithResult.from_dict({"result": {"approved": True, "by": "ana"}}))
    node = expect(completed, 200, TaskNodeState, "complete the await task")
    check(node.state == NodeState.SUCCEEDED and node.result == {"approved": True, "by": "ana"}, "completed: succeeded with the result",
          node.to_dict())
    done = wait_for_job(job.id, "the await job")
    check(done.state == JobState.SUCCEEDED and done.result == {"approved": True, "by": "ana"}, "await job: succeeded with the next step's result",
          done.to_dict())
    expect_problem(complete_task.sync_detailed(job.id, "approve", client=client,
                                               body=CompleteWithResult.from_dict({"result": 2})),
                   409, "task.terminal", "complete it again")
    expect_problem(complete_task.sync_detailed(job.id, "after", client=client,
                                               body=CompleteWithError(error=CompletionError(code="x.denied", message="no"))),
                   409, "task.notAwait", "complete a value task")

    step("an await task failed through the client: the error reaches the job")
    job = submit(task("await", id="gate"), "submit a second await job", labels=labelled(step="await"))
    wait_for_task(job.id, "gate", NodeState.RUNNING, "second await task")
    failed = complete_task.sync_detailed(job.id, "gate", client=client, body=CompleteWithError(
        error=CompletionError(code="approval.denied", message="Rejected by reviewer")))
    node = expect(failed, 200, TaskNodeState, "fail the await task")
    check(node.state == NodeState.FAILED and node.error.code == "approval.denied", "failed with the given error", node.to_dict())
    done = wait_for_job(job.id, "the failed await job")
    check(done.state == JobState.FAILED and isinstance(done.error, TaskError), "job failed with a TaskError", done.to_dict())
    check(done.error.code == "approval.denied" and done.error.task_id == "gate", "job error: code and taskId", done.error.to_dict())

    step("list with a cursor: five jobs, pages of two")
    ids = [submit(task("value", {"value": i}), f"list job {i}", labels=labelled(step="list")).id for i in range(5)]
    seen: list[str] = []
    cursor: Any = UNSET
    pages = 0
    while True:
        page = expect(list_jobs.sync_detailed(client=client, label=[f"tour:{RUN}", "step:list"], limit=2, cursor=cursor),
                      200, JobList, f"GET /v1/jobs page {pages + 1}")
        pages += 1
        check(len(page.items) <= 2, "a page holds at most `limit` jobs", len(page.items))
        for item in page.items:
            check("input" not in item.to_dict() and "result" not in item.to_dict(), "list items omit input and result", item.to_dict())
        seen += [item.id for item in page.items]
        if page.next_cursor is None:
            break
        check(isinstance(page.next_cursor, str), "nextCursor is a string until the last page", page.next_cursor)
        check(pages < 10, "the cursor ends", pages)
        cursor = page.next_cursor
    check(pages == 3, "five jobs in pages of two: three pages", pages)
    check(seen == list(reversed(ids)), "every job once, newest first", (seen, ids))
    expect_problem(list_jobs.sync_detailed(client=client, cursor="not-a-cursor"), 400, "query.invalid", "a forged cursor")

    step("cancel a running job, cancel again, delete it; 409 for deleting a running job")
    job = submit(
        ContinuationNode(type_="continuation", on=ContinuationNodeOn.CANCELLATION,
                         antecedent=task("delay", {"ms": 60_000}, id="nap"),
                         then=task("value", {"value": "cleaned up"}, id="cleanup")),
        "submit a long job", labels=labelled(step="cancel"),
    )
    wait_for_task(job.id, "nap", NodeState.RUNNING, "the delay")
    expect_problem(delete_job.sync_detailed(job.id, client=client), 409, "job.notTerminal", "delete a running job")
    cancelled = expect(cancel_job.sync_detailed(job.id, client=client), 202, Job, "cancel")
    done = wait_for_job(cancelled.id, "the cancelled job")
    # The cleanup handler recovers the cancellation: its result is the continuation's outcome.
    nap = expect(get_task.sync_detailed(job.id, "nap", client=client), 200, TaskNodeState, "GET the cancelled delay")
    check(nap.state == NodeState.CANCELLED, "the delay was cancelled", nap.state)
    cleanup = expect(get_task.sync_detailed(job.id, "cleanup", client=client), 200, TaskNodeState, "GET the cleanup")
    check(cleanup.state == NodeState.SUCCEEDED and cleanup.result == "cleaned up", "the cleanup handler ran", cleanup.to_dict())
    check(done.state == JobState.CANCELLED, "the job ends cancelled", done.state)
    check(done.progress.cancelled == 1 and done.progress.succeeded == 1, "progress: 1 cancelled, 1 succeeded", done.progress.to_dict())
    again = expect(cancel_job.sync_detailed(job.id, client=client), 200, Job, "cancel again")
    check(again.state == JobState.CANCELLED, "cancel again: still cancelled", again.state)

    step("events: the cancelled job's history, in order, with typed data")
    events = events_of(job.id, "GET events")
    check([event.seq for event in events] == list(range(1, len(events) + 1)), "seq 1, 2, 3, … without gaps", [e.seq for e in events])
    types = [event.type_ for event in events]
    check(types[:2] == [EventType.JOB_CREATED, EventType.JOB_STARTED] and types[-1] == EventType.JOB_CANCELLED,
          "job.created, job.started … job.cancelled", types)
    check((EventType.TASK_CANCELLED, "nap") in [(e.type_, e.task_id) for e in events], "task.cancelled for the delay", types)
    check(all((e.task_id is UNSET) == e.type_.value.startswith("job.") for e in events), "taskId exactly on task.* events",
          [e.to_dict() for e in events])
    check(all(e.data is UNSET for e in events), "no data on these event types", [e.to_dict() for e in events])
    tail = events_of(job.id, "GET events after the last", after=events[-1].seq)
    check(tail == [], "nothing after the last event", tail)
    started = time.monotonic()
    body = expect(list_events.sync_detailed(job.id, client=client, after=events[-1].seq, wait_ms=300), 200, object, "long poll")
    check(body.items == [] and time.monotonic() - started >= 0.25, "a long poll that times out: 200 with no items", body.items)
    graph = expect(get_job_graph.sync_detailed(job.id, client=client), 200, str, "GET graph")
    check(graph.startswith("flowchart"), "the graph is Mermaid by default", graph[:40])
    expect(delete_job.sync_detailed(job.id, client=client), 204, type(None), "delete the cancelled job")
    expect_problem(get_job.sync_detailed(job.id, client=client), 404, "job.notFound", "GET the deleted job")

    step("retries with the documented defaults: task.retrying events carry attempt, error and pause")
    job = submit(task("fail", {"code": "demo.flaky", "message": "not yet"}, id="flaky",
                      retry=RetryPolicy(max_attempts=3, delay_ms=10)),
                 "submit a retried failure", wait_ms=5000, labels=labelled(step="retry"))
    check(job.state == JobState.FAILED and job.error.code == "demo.flaky", "retried job: failed with the last error", job.to_dict())
    events = events_of(job.id, "GET events of the retried job")
    retries = [e.data for e in events if e.type_ == EventType.TASK_RETRYING]
    check(all(isinstance(data, TaskRetryingData) for data in retries), "task.retrying data: TaskRetryingData", retries)
    # backoff (default 2) doubles the pause; jitter (default false) leaves it exact.
    check([(d.attempt, d.delay_ms, d.error.code) for d in retries] == [(1, 10, "demo.flaky"), (2, 20, "demo.flaky")],
          "attempts 1 and 2 retried after 10 ms and 20 ms", [d.to_dict() for d in retries])
    failures = [e.data for e in events if e.type_ in (EventType.TASK_FAILED, EventType.JOB_FAILED)]
    check(len(failures) == 2 and all(isinstance(d, TaskError) and d.code == "demo.flaky" for d in failures),
          "task.failed and job.failed data: the TaskError", failures)
    flaky = expect(get_task.sync_detailed(job.id, "flaky", client=client), 200, TaskNodeState, "GET the retried task")
    check(flaky.attempts == 3, "three attempts", flaky.attempts)
    # The generated model sends every default it knows: the spec's defaults are the server's.
    job = submit(task("fail", {"code": "demo.flaky"}, retry=RetryPolicy(max_attempts=2)),
                 "submit a retried failure with default pauses", wait_ms=5000, labels=labelled(step="retry"))
    pauses = [e.data.delay_ms for e in events_of(job.id, "events") if e.type_ == EventType.TASK_RETRYING]
    check(job.state == JobState.FAILED and pauses == [0], "RetryPolicy's default delayMs is the server's (0)", pauses)

    step("typed error details: aggregate and http.status")
    job = submit(
        ParallelNode(type_="parallel", branches=[
            task("fail", {"code": "demo.a", "details": {"n": 1}}, id="a"),
            task("value", {"value": 1}, id="b"),
            task("fail", {"code": "demo.c"}, id="c"),
        ]),
        "submit a parallel job with two failing branches", wait_ms=5000, labels=labelled(step="details"))
    check(job.state == JobState.FAILED and job.error.code == "aggregate", "parallel: aggregate", job.to_dict())
    details = job.error.details
    check(isinstance(details, AggregateErrorDetails), "aggregate details: AggregateErrorDetails", details)
    check([(e.code, e.task_id) for e in details.errors] == [("demo.a", "a"), ("demo.c", "c")], "aggregate: the branch errors in order",
          details.to_dict())
    check(details.errors[0].details == {"n": 1}, "a fail task's own details stay as given", details.errors[0].details)
    job = submit(task("http", {"url": f"{BASE_URL}/v1/jobs/no-such-job", "timeoutMs": 5000}),
                 "submit an http task that gets a 404", wait_ms=10_000, labels=labelled(step="details"))
    check(job.state == JobState.FAILED and job.error.code == "http.status", "http task: http.status", job.to_dict())
    check(isinstance(job.error.details, HTTPStatusErrorDetails), "http.status details: HTTPStatusErrorDetails", job.error.details)
    check(job.error.details.status == 404 and "job.notFound" in job.error.details.body, "http.status: status and body",
          job.error.details.to_dict())

    step("a map, and a task id that needs percent-encoding in the path")
    job = submit(MapNode(type_="map", id="each", items=[1, 2, 3], template=task("value", {"value": "${input}"}, id="echo")),
                 "submit a map", wait_ms=5000, labels=labelled(step="map"))
    check(job.state == JobState.SUCCEEDED and job.result == [1, 2, 3], "map: the instance results in order", job.to_dict())
    instance = expect(get_task.sync_detailed(job.id, "echo[1]", client=client), 200, TaskNodeState, "GET echo[1]")
    check(instance.id == "echo[1]" and instance.result == 2 and instance.parent == "each", "map instance echo[1]", instance.to_dict())
    expect_problem(cancel_task.sync_detailed(job.id, "echo[1]", client=client), 409, "task.terminal", "cancel a finished instance")

    step("404 problems")
    expect_problem(get_job.sync_detailed("no-such-job", client=client), 404, "job.notFound", "GET an unknown job")
    expect_problem(get_task.sync_detailed(job.id, "no/such[task]", client=client), 404, "task.notFound", "GET an unknown task")
    expect_problem(list_events.sync_detailed("no-such-job", client=client), 404, "job.notFound", "events of an unknown job")

    step("422 problems with a pointer per problem, and a valid graph")
    response = validate_job.sync_detailed(client=client, body=JobSubmission(graph=SeriesNode(type_="series", steps=[
        task("sleep", id="nap"),
        task("value", executor="gpu"),
        task("delay", {"ms": -1}),
    ])))
    problem = expect_problem(response, 422, "graph.invalid", "validate an invalid job")
    pointers = sorted(error.pointer for error in problem.errors)
    check(pointers == ["/graph/steps/0/action", "/graph/steps/1/executor", "/graph/steps/2/params/ms"],
          "every problem, each with its pointer", [error.to_dict() for error in problem.errors])
    check(all(error.message for error in problem.errors), "each problem has a message", [e.to_dict() for e in problem.errors])
    response = submit_job.sync_detailed(client=client, body=JobSubmission(graph=task("value"), timeout_ms=2_678_400_001))
    problem = expect_problem(response, 422, "graph.invalid", "a job timeout over 31 days")
    check([error.pointer for error in problem.errors] == ["/timeoutMs"], "pointer /timeoutMs", [e.to_dict() for e in problem.errors])
    result = expect(validate_job.sync_detailed(client=client, body=JobSubmission(graph=SeriesNode(type_="series", steps=[
        task("value", id="one"), ParallelNode(type_="parallel", branches=[task("value"), task("value")])]))),
        200, ValidationResult, "validate a valid job")
    check((result.valid, result.nodes, result.depth) == (True, 5, 3), "valid: 5 nodes, depth 3", result.to_dict())


try:
    tour()
except TourFailure as failure:
    print(f"FAIL: {failure}", file=sys.stderr)
    sys.exit(1)
print(f"✔ client tour: {checks} checks passed against {BASE_URL}")
