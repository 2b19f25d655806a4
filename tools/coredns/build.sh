#!/usr/bin/env bash
# Builds CoreDNS from the official Go module pinned in tools/shared/go.mod, caches it under the user's cache
# directory keyed by version, and prints the directory holding the `coredns` binary.
#
#   GANTRY_COREDNS_DIR=/path/with/binary  skips the build and uses that binary.
set -euo pipefail

# The module pinning the version: tools/shared, which several tools share.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../shared" && pwd)"

if [[ -n "${GANTRY_COREDNS_DIR:-}" ]]; then
  [[ -x "$GANTRY_COREDNS_DIR/coredns" ]] || { echo "GANTRY_COREDNS_DIR=$GANTRY_COREDNS_DIR has no executable coredns" >&2; exit 1; }
  echo "$GANTRY_COREDNS_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
version="$(version_of github.com/coredns/coredns)"
[[ -n "$version" ]] || { echo "cannot read the CoreDNS version from $here/go.mod" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/coredns/coredns-${version}-$(module_key)"
mkdir -p "$cache"
go_build "$cache" coredns github.com/coredns/coredns
echo "$cache"
