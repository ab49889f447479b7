#!/usr/bin/env bash
# A throw-away PostgreSQL 15 server for tests, benchmarks and CI: Debian's package, run as the
# `postgres` user (it refuses root), data in a temporary directory, listening on 127.0.0.1 at a
# free port, trust authentication on loopback.
#
#   scripts/postgres.sh start DIR [--durable]   prints the database URL (postgres://…/taskserver)
#   scripts/postgres.sh stop DIR
#   scripts/postgres.sh restart DIR             stop then start on the same port (same data)
#   scripts/postgres.sh url DIR                 prints the URL again
#
# The role `taskserver_password` (password `right-password`) must authenticate with its password.
# Without --durable the server runs with fsync off (a test server's data need not survive power
# loss; tests run much faster). PG_EXTRA adds server options (e.g. "-c shared_preload_libraries=…").
# Benchmarks pass --durable: fsync and synchronous_commit on, so
# their figures compare with SQLite `--sync full`.
set -euo pipefail

command=${1:?usage: postgres.sh start|stop|restart|url DIR [--durable]}
dir=${2:?usage: postgres.sh start|stop|restart|url DIR [--durable]}
durable=${3:-}
bin=/usr/lib/postgresql/15/bin
as_postgres() { runuser -u postgres -- "$@"; }

url() { echo "postgres://taskserver@127.0.0.1:$(cat "$dir/port")/taskserver"; }

start() {
    if [[ ! -x $bin/initdb ]]; then
        echo "postgres.sh: $bin/initdb not found: apt-get install -y postgresql-15" >&2
        exit 1
    fi
    mkdir -p "$dir"
    chown postgres "$dir"
    if ! as_postgres test -x "$dir"; then
        echo "postgres.sh: the postgres user cannot enter $dir (a parent directory is closed to it)" >&2
        exit 1
    fi
    if [[ -f $dir/data/PG_VERSION ]] && as_postgres "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        url # already running
        return
    fi
    if [[ ! -f $dir/data/PG_VERSION ]]; then
        as_postgres "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log" >&2; exit 1; }
        # One role that must give a password (the start-up tests try a wrong one and a file).
        sed -i '1i host all taskserver_password 127.0.0.1/32 scram-sha-256' "$dir/data/pg_hba.conf"
    fi
    if [[ ! -f $dir/port ]]; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' >"$dir/port"
    fi
    local options="-c listen_addresses=127.0.0.1 -c port=$(cat "$dir/port") -c unix_socket_directories=$dir"
    options+=" -c max_connections=200 -c shared_buffers=256MB ${PG_EXTRA:-}"
    if [[ $durable != --durable && ! -f $dir/durable ]]; then
        options+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    else
        touch "$dir/durable"
    fi
    as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "$options" -w -t 30 start >/dev/null ||
        { tail -20 "$dir/server.log" >&2; exit 1; }
    # The role and database TaskServer uses (created once; a restart finds them).
    psql -h "$dir" -p "$(cat "$dir/port")" -U postgres -d postgres -v ON_ERROR_STOP=1 -q >/dev/null <<'SQL'
SELECT 'CREATE ROLE taskserver LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'taskserver')\gexec
SELECT 'CREATE DATABASE taskserver OWNER taskserver' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'taskserver')\gexec
SELECT 'CREATE ROLE taskserver_password LOGIN PASSWORD ''right-password'' IN ROLE taskserver' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'taskserver_password')\gexec
SQL
    url
}

stop() {
    [[ -f $dir/data/PG_VERSION ]] || return 0
    as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
}

case $command in
start) start ;;
stop) stop ;;
restart) stop && start ;;
url) url ;;
*) echo "postgres.sh: unknown command $command" >&2; exit 64 ;;
esac
