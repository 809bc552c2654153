#!/usr/bin/env bash
# Install Shopify's toxiproxy server, at a pinned version, with this machine's Go.
#
# Why build it: no prebuilt binary can be downloaded here, but the Go module
# proxy can be reached, and toxiproxy is a Go module (cmd/server). Why pin it:
# the network nemesis relies on the exact behaviour of its toxics (a removed
# `timeout` toxic closes the connections it held, a disabled proxy closes its
# listener), so an upgrade is a reviewed change of this line, not an accident.
#
# Installs into .cache/bin/toxiproxy-server (override the folder with
# TOXIPROXY_BIN_DIR), does nothing when that binary already is this version,
# and prints the binary's path as its last line of stdout.
set -euo pipefail

VERSION=v2.12.0  # the newest release the Go module proxy serves; needs Go >= 1.23
MODULE=github.com/Shopify/toxiproxy/v2

root="$(cd "$(dirname "$0")/.." && pwd)"
bin_dir="${TOXIPROXY_BIN_DIR:-$root/.cache/bin}"
target="$bin_dir/toxiproxy-server"

go_bin="$(command -v go || true)"
if [ -z "$go_bin" ] && [ -x /usr/local/go/bin/go ]; then
    go_bin=/usr/local/go/bin/go
fi
if [ -z "$go_bin" ]; then
    echo "install-toxiproxy: no Go toolchain (go on PATH or /usr/local/go/bin/go); toxiproxy $VERSION needs Go >= 1.23" >&2
    exit 1
fi

# The module version recorded in a binary's build info ("" if none, or not ours).
installed_version() {
    [ -x "$1" ] || return 0
    "$go_bin" version -m "$1" 2>/dev/null | awk -v m="$MODULE" '$1 == "mod" && $2 == m { print $3 }'
}

mkdir -p "$bin_dir"
# Two pytest-xdist workers may run this at once: one builds, the other waits and finds it built.
exec 9>"$bin_dir/.toxiproxy-install.lock"
flock 9

if [ "$(installed_version "$target")" = "$VERSION" ]; then
    echo "$target"
    exit 0
fi

echo "install-toxiproxy: building $MODULE/cmd/server@$VERSION with $("$go_bin" version)" >&2
build_dir="$(mktemp -d "$bin_dir/.build.XXXXXX")"
trap 'rm -rf "$build_dir"' EXIT
# GOTOOLCHAIN=local: never try to download another Go; the -X sets what GET /version answers.
GOBIN="$build_dir" GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
    "$go_bin" install -trimpath -ldflags "-X $MODULE.Version=${VERSION#v}" "$MODULE/cmd/server@$VERSION" >&2
mv -f "$build_dir/server" "$target"  # same folder, so the binary appears whole or not at all

if [ "$(installed_version "$target")" != "$VERSION" ]; then
    echo "install-toxiproxy: $target does not report $MODULE $VERSION after the build" >&2
    exit 1
fi
echo "$target"
