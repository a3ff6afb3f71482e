#!/usr/bin/env bash
# Starts (or reuses) a throwaway PostgreSQL 15 cluster for the tests and the
# bench that run swarmd on `store.backend = "postgres"`: initdb into a
# directory of its own (${SWARMD_PG_DIR:-${TMPDIR:-/tmp}/swarmd-pg15-<uid>}),
# pg_ctl on a free loopback port, as the unprivileged `postgres` user when
# run as root (PostgreSQL refuses to run as root). The superuser `swarmd`
# logs in with a password (scram-sha-256, as a real deployment would), kept
# in `<dir>/password`, mode 0600, never printed.
#
# Idempotent: a live cluster is reused; a stopped or missing one is created
# anew (installing Debian's postgresql-15 first when initdb is not there).
# A stopped cluster is never restarted: nothing in it outlives a test run,
# and after a crash PostgreSQL fsyncs its whole data directory before it
# listens, which for the databases of failed tests kept there can outlast
# any start timeout. Prints two lines on stdout: the connection URL
# (without the password) and the password file's path; everything else goes
# to stderr. Durability settings are PostgreSQL's defaults (fsync = on,
# synchronous_commit = on).
set -euo pipefail

PG_BIN="${SWARMD_PG_BIN:-/usr/lib/postgresql/15/bin}"
dir="${SWARMD_PG_DIR:-${TMPDIR:-/tmp}/swarmd-pg15-$(id -u)}"
data="$dir/data"
password_file="$dir/password"
port_file="$dir/port"

fail() {
    echo "pg-env: $*" >&2
    exit 1
}

# Runs a PostgreSQL binary as the cluster's owner.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

url() {
    echo "postgres://swarmd@127.0.0.1:$(cat "$port_file")/postgres"
    echo "$password_file"
}

live() {
    [ -f "$port_file" ] && [ -f "$data/PG_VERSION" ] &&
        as_owner "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1
}

mkdir -p "$dir"
# One starter at a time: parallel test processes call this at once.
exec 9>"$dir.lock"
flock 9

if live; then
    url
    exit 0
fi

if [ ! -x "$PG_BIN/initdb" ]; then
    [ "$(id -u)" -eq 0 ] || fail "$PG_BIN/initdb is missing; install postgresql-15"
    echo "pg-env: installing postgresql-15 with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >&2; } ||
        fail "apt-get install postgresql-15 failed (output above)"
fi

if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || fail "running as root needs the unprivileged user postgres"
    chown postgres: "$dir"
fi
chmod 0700 "$dir"

if [ -e "$data" ]; then
    echo "pg-env: the cluster in $data is not running; making it anew" >&2
    if [ -f "$dir/log" ]; then mv -f "$dir/log" "$dir/log.old"; fi
fi
rm -rf "$data" "$dir"/.s.PGSQL.*
(
    umask 077
    # A password of 32 hex digits; initdb reads it from a file it may read.
    head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$password_file"
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$password_file"; fi
    as_owner "$PG_BIN/initdb" -D "$data" -U swarmd --pwfile="$password_file" \
        --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >&2 ||
        fail "initdb failed (output above)"
    if [ "$(id -u)" -eq 0 ]; then chown root: "$password_file"; fi
    chmod 0600 "$password_file"
)

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "$port" >"$port_file"
# Many test processes each open a few connections; sockets in the cluster's
# own directory, not /var/run/postgresql.
as_owner "$PG_BIN/pg_ctl" -D "$data" -l "$dir/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c max_connections=300" \
    start >&2 9>&- || fail "pg_ctl start failed; see $dir/log"
echo "pg-env: PostgreSQL 15 listening on 127.0.0.1:$port (data in $data)" >&2
url
