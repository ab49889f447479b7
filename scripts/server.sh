# shellcheck shell=bash disable=SC2034  # SERVER_PID, SERVER_PORT and SERVER_URL are for the caller
# Starts a taskserver for a test on a port the kernel picks, with no free-port race: the server is
# started with `--port 0` and the port it bound is read from its "taskserver listening" log line
# (text: `… port=41234 … taskserver listening`; json: `"port":"41234"`). Source it, do not run it:
#
#   . scripts/server.sh
#   start_server LOG BIN serve [ARGS…]   # BIN's stdout and stderr go to LOG; appends --port 0
#   echo "$SERVER_PID $SERVER_PORT $SERVER_URL"
#
# start_server returns once the server listens, or prints LOG and returns 1 when the process exits
# first or the line has not appeared within $START_SERVER_TIMEOUT seconds (default 30); it
# reads LOG every $START_SERVER_POLL seconds (default 0.02). The log level must be `notice` or
# more verbose for the line to be written.

# server_port_from_log LOG — the port of LOG's first "taskserver listening" line (nothing if none).
server_port_from_log() {
    sed -n -E '/taskserver listening/{s/.*(\<port=|"port":")([0-9]+).*/\2/p;q}' "$1" 2>/dev/null
}

SERVER_PID=""
SERVER_PORT=""
SERVER_URL=""
start_server() {
    local log=$1 deadline
    shift
    : >"$log"
    "$@" --port 0 >>"$log" 2>&1 &
    SERVER_PID=$!
    SERVER_PORT=""
    SERVER_URL=""
    deadline=$((SECONDS + ${START_SERVER_TIMEOUT:-30}))
    # Polls the log (a bounded loop on the real condition: the line is written after the bind).
    while :; do
        SERVER_PORT=$(server_port_from_log "$log")
        if [ -n "$SERVER_PORT" ]; then
            SERVER_URL="http://127.0.0.1:$SERVER_PORT"
            return 0
        fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            local status=0
            wait "$SERVER_PID" || status=$?
            echo "the server exited with status $status before listening: $*" >&2
            cat "$log" >&2
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "the server logged no 'taskserver listening' line within ${START_SERVER_TIMEOUT:-30} s: $*" >&2
            cat "$log" >&2
            kill "$SERVER_PID" 2>/dev/null || true
            wait "$SERVER_PID" 2>/dev/null || true
            return 1
        fi
        sleep "${START_SERVER_POLL:-0.02}"
    done
}

# store_args DIR — the store options of a test server: `--data DIR/taskserver.sqlite` (the
# default users get), or, when TEST_STORE_URL names a PostgreSQL database (scripts/postgres.sh),
# `--database` on a schema of its own, created here, so that servers of one run share no rows.
# Unquoted use is safe: neither form contains spaces.
store_args() {
    if [ -n "${TEST_STORE_URL:-}" ]; then
        local schema sep='?'
        schema="s$(date +%s%N)_$RANDOM"
        psql "$TEST_STORE_URL" -qc "CREATE SCHEMA $schema" >/dev/null
        [[ $TEST_STORE_URL == *\?* ]] && sep='&'
        echo "--database ${TEST_STORE_URL}${sep}options=-csearch_path%3D$schema"
    else
        echo "--data $1/taskserver.sqlite"
    fi
}
