#!/usr/bin/env bash
# Install Shopify's toxiproxy server, at leasecheck's pinned version, with this machine's Go.
#
# A wrapper for CI and checkouts: the recipe and the one pinned version live in
# leasecheck/servers/tools.py, behind `leasecheck install-toxiproxy`, so a pip user and
# a developer get the same binary in the same place: the per-user cache
# $XDG_CACHE_HOME/leasecheck/bin (default ~/.cache/leasecheck/bin), where
# leasecheck looks after PATH. Does nothing when that binary already is the
# pinned version; prints the binary's path as its last line of stdout.
# Needs leasecheck installed in python3 (pip install -e . first).
set -euo pipefail
exec "${PYTHON:-python3}" -m leasecheck install-toxiproxy "$@"
