#!/usr/bin/env python3
"""The SQLite store on a disk that fills up (issue #43 item 1), with real processes and a real
file system: a small tmpfs mounted for the test, filled with `dd`, then freed.

    python scripts/disk-full-test.py BINARY

Steps:
  1. A tmpfs of 24 MB is mounted on a temporary directory (root is needed, as for any mount);
     the server runs with `--data` in it.
  2. A job whose task waits (`await`) starts; jobs are submitted and answered 201.
  3. `dd` fills the file system until it is full (ENOSPC). Jobs are submitted until one is
     refused: from then, every write is refused by SQLite (SQLITE_FULL).
  4. Checked while it is full: `/readyz` answers 503; completing the waiting task is answered 503
     `store.unavailable` within the 10 s bound plus 5 s (not left hanging, not acknowledged);
     every answer to a POST is a 201 or a 503 (never a 500, never a reset) within that bound.
  5. The filler file is removed. Checked: `/readyz` is 200 again within 30 s; the completion kept
     in the journal is committed (the job ends `succeeded` with the result it was given, and a
     second completion is answered 409); every job answered 201, before or during the fill, ends
     `succeeded`.
  6. The server is stopped and started again on the same file: every job answered 201 is there,
     `succeeded`.
Exit status 0 when every check passes. The tmpfs is unmounted on exit, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import TestServer, wait_until  # noqa: E402

BOUND = 10 + 5  # DurableWait.bound and slack for a busy machine
failures = []


def check(ok, message):
    print(("ok   " if ok else "FAIL ") + message, flush=True)
    if not ok:
        failures.append(message)


def request(port, method, path, body=None, timeout=30):
    """(status, body); status None on a reset or a timeout."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw or b"null")
        except ValueError:
            return error.code, raw.decode(errors="replace")
    except OSError:
        return None, None


GATE = {"graph": {"type": "task", "id": "gate", "action": "await"}}


def value_job(n):
    # A body of some size, so that commits need new pages soon after the disk is full.
    return {"graph": {"type": "task", "id": "v", "action": "value", "params": {"value": n}},
            "labels": {"padding": "x" * 200}}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: disk-full-test.py BINARY")
    binary = os.path.abspath(sys.argv[1])
    mount = tempfile.mkdtemp(prefix="taskserver-disk-full-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mount],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        sys.exit(f"cannot mount a tmpfs on {mount} (root is needed): {mounted.stderr.strip()}")
    server = None
    started = time.monotonic()
    try:
        data = os.path.join(mount, "taskserver.sqlite")
        log = os.path.join(tempfile.gettempdir(), f"disk-full-{os.getpid()}.log")
        server = TestServer(binary, ["--data", data, "--log-level", "notice"], log=log)
        port = server.port
        status, gate = request(port, "POST", "/v1/jobs", GATE)
        check(status == 201, f"the waiting job is accepted ({status})")
        gate_id = gate["id"]
        wait_until(lambda: request(port, "GET", f"/v1/jobs/{gate_id}/tasks/gate")[1].get("state") == "running", 10)
        accepted = []
        for n in range(50):
            status, job = request(port, "POST", "/v1/jobs", value_job(n))
            if status == 201:
                accepted.append((job["id"], n))
        check(len(accepted) == 50, f"50 jobs accepted before the fill ({len(accepted)})")

        # Fill the file system (dd stops at ENOSPC with a non-zero status).
        filler = os.path.join(mount, "filler")
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        free = os.statvfs(mount)
        print(f"filled: {free.f_bavail * free.f_frsize} bytes left on the tmpfs", flush=True)

        # Submit until one is refused; every answer is a 201 or a 503 within the bound.
        refused = None
        wrong = []
        for n in range(50, 5050):
            sent = time.monotonic()
            status, job = request(port, "POST", "/v1/jobs", value_job(n), timeout=BOUND + 5)
            took = time.monotonic() - sent
            if status == 201:
                accepted.append((job["id"], n))
            elif status == 503 and isinstance(job, dict) and job.get("code", "").startswith("store."):
                refused = job
                break
            else:
                wrong.append(f"{status} {job!r:.120}")
                break
            if took > BOUND:
                wrong.append(f"a 201 after {took:.1f} s")
        check(not wrong, f"every POST while filling is answered 201 or 503 store.* in time ({wrong[:3]})")
        check(refused is not None, f"a submission is refused once the disk is full: {refused}")

        check(wait_until(lambda: request(port, "GET", "/readyz")[0] == 503, 5),
              "/readyz answers 503 while the store cannot commit")
        sent = time.monotonic()
        status, body = request(port, "POST", f"/v1/jobs/{gate_id}/tasks/gate/complete", {"result": "done"},
                               timeout=BOUND + 10)
        took = time.monotonic() - sent
        check(status == 503 and body.get("code") == "store.unavailable" and took <= BOUND,
              f"the completion is answered 503 store.unavailable within {BOUND} s ({status} after {took:.1f} s)")
        check(request(port, "GET", "/readyz")[0] == 503, "/readyz still 503")

        os.remove(filler)
        back = wait_until(lambda: request(port, "GET", "/readyz")[0] == 200, 30, interval=0.1)
        check(back, "/readyz is 200 again within 30 s of the space being freed")
        ended = wait_until(lambda: request(port, "GET", f"/v1/jobs/{gate_id}")[1].get("state") == "succeeded", 30)
        check(ended, "the kept completion is committed: the waiting job succeeded")
        status, job = request(port, "GET", f"/v1/jobs/{gate_id}")
        check(job.get("result") == "done", f"with the result it was given ({job.get('result')!r})")
        status, _ = request(port, "POST", f"/v1/jobs/{gate_id}/tasks/gate/complete", {"result": "again"})
        check(status == 409, f"a second completion is 409 ({status})")

        def all_succeeded():
            return all(request(port, "GET", f"/v1/jobs/{job_id}")[1].get("state") == "succeeded"
                       for job_id, _ in accepted)
        check(wait_until(all_succeeded, 30, interval=0.5), f"every job answered 201 ({len(accepted)}) succeeded")
        status, _ = request(port, "POST", "/v1/jobs", value_job(0))
        check(status == 201, f"a new job is accepted again ({status})")

        # Restart on the same file: everything acknowledged is there.
        stopped = server.stop(timeout=30)
        check(stopped == 0, f"the server stops cleanly ({stopped})")
        server = TestServer(binary, ["--data", data, "--log-level", "notice"], log=log)
        port = server.port
        missing = [job_id for job_id, n in accepted + [(gate_id, None)]
                   if request(port, "GET", f"/v1/jobs/{job_id}")[1].get("state") != "succeeded"]
        check(not missing, f"after a restart every acknowledged job is there, succeeded ({len(missing)} not: "
                           f"{missing[:3]})")
        print(f"jobs checked: {len(accepted) + 1}; run time {time.monotonic() - started:.1f} s", flush=True)
    finally:
        if server is not None:
            server.stop(timeout=30)
            if failures:
                print("--- the server's log (last 40 lines)", flush=True)
                print("\n".join(server.log_text().splitlines()[-40:]), flush=True)
        subprocess.run(["umount", mount], capture_output=True)
        os.rmdir(mount)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("disk-full test passed", flush=True)


if __name__ == "__main__":
    main()
