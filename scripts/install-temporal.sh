#!/usr/bin/env bash
# Build the Temporal CLI (whose `temporal server start-dev` is the broker of the temporal
# queue audit), at leasecheck's pinned version, with this machine's Go.
#
# The recipe and the one pinned version live in leasecheck/servers/temporal.py
# (TEMPORAL_VERSION, v1.5.1: the newest release `go install` can build); this runs it.
# The binary goes to the per-user cache $XDG_CACHE_HOME/leasecheck/bin (default
# ~/.cache/leasecheck/bin), where leasecheck looks after PATH. Does nothing when that
# binary already is the pinned version; prints the binary's path as its last line.
# A cold Go module cache takes about 6.5 minutes on 2 cores; the binary is ~250 MB.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# a checkout works without installing leasecheck: its root on the path, after an installed one's
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$here"
exec "${PYTHON:-python3}" -m leasecheck.servers.temporal "$@"
