"""Runs the schemathesis CLI (`st`) with room for deep recursion.

Our graph schema is recursive (a node holds nodes). Schemathesis' coverage phase walks it
recursively, and with Python's default limit (1000) a RecursionError can strike while CPython is
compiling generated code, which surfaces as an internal "Runtime Error" of schemathesis (seen:
"SystemError: AST constructor recursion depth mismatch" on POST /v1/graphs/validate) rather than as
a finding about the server. A higher limit and larger thread stacks (schemathesis' workers are
threads) avoid it. Usage: python3 Tests/contract/st.py <st arguments>
"""
import sys
import threading

sys.setrecursionlimit(50_000)
threading.stack_size(512 * 1024 * 1024)

from schemathesis.cli import schemathesis  # noqa: E402

status = 1


def main():
    global status
    try:
        schemathesis(args=sys.argv[1:], prog_name="st")
        status = 0
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)


# The main thread's stack is fixed at start-up; run the CLI on a thread with the larger stack.
thread = threading.Thread(target=main)
thread.start()
thread.join()
sys.exit(status)
