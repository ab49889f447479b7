"""Starts a taskserver for a test, and waits on conditions rather than sleeping.

The server is started with `--port 0`: the kernel picks a free port at bind time, and the server
logs it on its "taskserver listening" line (text: `… port=41234 … taskserver listening`; json:
`"port":"41234"`), so there is no window in which another process can take the port (as there is
when a test binds a socket to find a free port, closes it, and hands the number to the server).

    from testserver import TestServer, wait_until
    server = TestServer(binary, ["--memory"])          # returns once the server listens
    server.port, server.url, server.proc
    server.wait_for_log(lambda line: "taskserver draining" in line)
    server.log_text()                                   # for failure messages

Used by the Python scripts beside it (they put this directory on sys.path).
"""
import atexit
import os
import re
import subprocess
import tempfile
import time

LISTENING = "taskserver listening"
PORT = re.compile(r'(?:\bport=|"port":")(\d+)')


class ServerStartError(Exception):
    pass


def wait_until(predicate, timeout, interval=0.02):
    """Polls `predicate` (a bounded loop) until it returns a true value, which is returned; the
    last false value once `timeout` seconds have passed. For conditions with no event to wait on
    (a file being written, an endpoint that cannot long-poll)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


class TestServer:
    """`BINARY serve ARGS… --port 0`, its stdout and stderr appended to `log` (a path; by default a
    temporary file, removed when the script exits). The constructor returns once the server has
    logged the port it listens on, and raises ServerStartError (with the log) when the process
    exits first or `timeout` passes. A server still running when the script exits is killed."""

    def __init__(self, binary, args=(), env=None, cwd=None, log=None, timeout=30.0, preexec_fn=None):
        if log is None:
            handle, log = tempfile.mkstemp(prefix="taskserver-", suffix=".log")
            os.close(handle)
            atexit.register(_remove, log)
        self.log_path = log
        self._log = open(log, "ab")
        # Only lines written by this process count (the log may be shared with earlier runs).
        self._start_offset = self._log.tell()
        self.command = [binary, "serve", *args, "--port", "0"]
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=self._log, env=env, cwd=cwd,
                                     preexec_fn=preexec_fn)
        atexit.register(self._kill_if_running)  # a failed check exits at once: no server left behind
        line = self.wait_for_log(lambda text: LISTENING in text and PORT.search(text), timeout)
        if line is None:
            status = self.proc.poll()
            if status is None:
                self.proc.kill()
                self.proc.wait()
                reason = f"logged no '{LISTENING}' line within {timeout:.0f} s"
            else:
                reason = f"exited with status {status} before listening"
            raise ServerStartError(f"the server {reason}: {' '.join(self.command)}\n{self.log_text()}")
        self.port = int(PORT.search(line).group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def log_text(self):
        """What this server has logged so far."""
        self._log.flush()
        with open(self.log_path, "rb") as f:
            f.seek(self._start_offset)
            return f.read().decode(errors="replace")

    def wait_for_log(self, predicate, timeout=30.0):
        """The first line this server logged for which `predicate(line)` is true, waiting for it
        (a bounded poll of the log file) until `timeout` passes or the process exits; None then."""
        offset = self._start_offset
        pending = b""
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc.poll() is not None  # read once more after an exit: nothing is lost
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if predicate(line):
                    return line
            if exited or time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def signal(self, number):
        self.proc.send_signal(number)

    def _kill_if_running(self):
        if self.proc.poll() is None:
            self.kill()

    def kill(self):
        """SIGKILL, and reap."""
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout=30.0):
        """SIGTERM; the exit status (None if it had to be killed after `timeout`)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
