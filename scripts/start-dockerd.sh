#!/usr/bin/env bash
# Make a Docker engine answer on this machine, for `leasecheck run --env docker` and
# tests/servers/test_docker.py; `--stop` stops the engine this script started, and no other.
#
# Why a script: the CI machines and fresh developer machines have no engine running
# and no systemd to start one, so whoever needs Docker starts dockerd by hand. Doing
# that the same way everywhere (one log, one pidfile, a bounded wait, the same
# fallback when overlay2 is unavailable) is what this is for. It is idempotent: when
# `docker info` already answers (an engine someone else runs, or ours from a previous
# call) it changes nothing. Concurrent callers (pytest-xdist workers) are serialised
# with flock, so only one of them starts an engine.
#
# Environment:
#   LEASECHECK_DOCKERD_DIR   where the pidfile, log and lock live (default /tmp/leasecheck-dockerd)
#   LEASECHECK_DOCKERD_WAIT  seconds to wait for the engine to answer (default 60)
#   LEASECHECK_DOCKERD_ARGS  extra dockerd arguments (e.g. "--storage-driver vfs")
#
# Exit status: 0 when `docker info` answers at the end (or, with --stop, when our
# engine is gone); 1 otherwise, with the reason and the tail of the dockerd log.
set -euo pipefail

STATE_DIR="${LEASECHECK_DOCKERD_DIR:-/tmp/leasecheck-dockerd}"
PIDFILE="$STATE_DIR/dockerd.pid"
LOG="$STATE_DIR/dockerd.log"
LOCK="$STATE_DIR/lock"
WAIT="${LEASECHECK_DOCKERD_WAIT:-60}"
read -r -a EXTRA_ARGS <<<"${LEASECHECK_DOCKERD_ARGS:-}"

say() { echo "start-dockerd: $*"; }
fail() {
    echo "start-dockerd: $*" >&2
    exit 1
}
# fail, showing what dockerd said (only when it is our dockerd that failed)
fail_with_log() {
    echo "start-dockerd: $*" >&2
    if [ -f "$LOG" ]; then
        echo "--- last lines of $LOG ---" >&2
        tail -n 25 "$LOG" >&2 || true
    fi
    exit 1
}

engine_answers() {
    command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1
}

# The pid in our pidfile, if that process is alive and is a dockerd; empty otherwise.
our_pid() {
    [ -f "$PIDFILE" ] || return 0
    local pid
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    [ -r "/proc/$pid/cmdline" ] || return 0
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q dockerd; then
        echo "$pid"
    fi
}

install_engine() {
    if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
        return
    fi
    [ "$(id -u)" -eq 0 ] || fail "dockerd is not installed and we are not root to install it (apt-get install docker.io)"
    say "dockerd not installed: apt-get update && apt-get install docker.io"
    export DEBIAN_FRONTEND=noninteractive
    # other apt users on the machine (CI steps, other sessions) hold the lock for a while
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends docker.io >/dev/null \
        || fail "apt-get install docker.io failed"
    command -v dockerd >/dev/null 2>&1 || fail "docker.io installed but dockerd is not on PATH"
}

# Start dockerd in the background with its own pidfile; wait (bounded) until it answers.
# Returns 0 when the engine answers, 1 when dockerd exited or did not answer in time.
launch() {
    local args=("$@")
    say "starting dockerd${args[*]:+ ${args[*]}} (log $LOG, pidfile $PIDFILE)"
    echo "=== $(date -u +%FT%TZ) dockerd ${args[*]:-}" >>"$LOG"
    # setsid: the engine outlives this script and is not hit by the caller's Ctrl-C
    # 9>&-: the engine must not inherit our lock, or it would hold it for its whole life
    setsid dockerd --pidfile "$PIDFILE" "${args[@]}" </dev/null >>"$LOG" 2>&1 9>&- &
    local pid=$!
    local deadline=$((SECONDS + WAIT))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if engine_answers; then
            say "engine answers (dockerd pid $(cat "$PIDFILE" 2>/dev/null || echo "$pid"), storage driver $(docker info --format '{{.Driver}}' 2>/dev/null || echo '?'))"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            say "dockerd exited while starting"
            return 1
        fi
        sleep 0.5
    done
    say "dockerd did not answer within ${WAIT} s: stopping it"
    stop_pid "$pid"
    return 1
}

stop_pid() {
    local pid="$1"
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    say "dockerd $pid ignored SIGTERM for 30 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

start() {
    if engine_answers; then
        say "engine already answers: nothing to do"
        return 0
    fi
    case "${DOCKER_HOST:-}" in
        "" | unix:///var/run/docker.sock | unix:///run/docker.sock) ;;
        *) fail "DOCKER_HOST=$DOCKER_HOST does not answer; this script starts only a local engine on the default socket" ;;
    esac
    install_engine
    if engine_answers; then  # e.g. the package's own service came up
        say "engine answers after install"
        return 0
    fi
    local stale
    stale="$(our_pid)"
    if [ -n "$stale" ]; then
        say "our dockerd (pid $stale) runs but does not answer: restarting it"
        stop_pid "$stale"
    fi
    rm -f "$PIDFILE"
    if launch "${EXTRA_ARGS[@]}"; then
        return 0
    fi
    # overlay2 needs kernel and backing-filesystem support that some machines lack; vfs always works
    if [[ " ${EXTRA_ARGS[*]} " != *" --storage-driver"* ]]; then
        say "retrying with --storage-driver vfs"
        rm -f "$PIDFILE"
        launch "${EXTRA_ARGS[@]}" --storage-driver vfs && return 0
    fi
    fail_with_log "could not start a Docker engine"
}

stop() {
    local pid
    pid="$(our_pid)"
    if [ -z "$pid" ]; then
        say "no dockerd of ours runs (pidfile $PIDFILE): nothing to stop"
        rm -f "$PIDFILE"
        return 0
    fi
    say "stopping our dockerd (pid $pid)"
    stop_pid "$pid"
    rm -f "$PIDFILE"
    say "stopped"
}

main() {
    mkdir -p "$STATE_DIR" || fail "cannot create $STATE_DIR"
    exec 9>"$LOCK"
    flock -w 300 9 || fail "another start-dockerd held $LOCK for 5 minutes"
    case "${1:-}" in
        "") start ;;
        --stop) stop ;;
        -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' ;;
        *) fail "unknown argument ${1} (use no argument to start, --stop to stop)" ;;
    esac
}

main "$@"
