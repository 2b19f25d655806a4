#!/usr/bin/env bash
# Builds CoreDNS from the official Go module pinned in go.mod, caches it under the user's cache
# directory keyed by version, and prints the directory holding the `coredns` binary.
#
#   GANTRY_COREDNS_DIR=/path/with/binary  skips the build and uses that binary.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ -n "${GANTRY_COREDNS_DIR:-}" ]]; then
  [[ -x "$GANTRY_COREDNS_DIR/coredns" ]] || { echo "GANTRY_COREDNS_DIR=$GANTRY_COREDNS_DIR has no executable coredns" >&2; exit 1; }
  echo "$GANTRY_COREDNS_DIR"
  exit 0
fi

version="$(awk '$1 == "github.com/coredns/coredns" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")"
[[ -n "$version" ]] || { echo "cannot read the CoreDNS version from $here/go.mod" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/coredns/coredns-${version}"
mkdir -p "$cache"

if [[ ! -x "$cache/coredns" ]]; then
  echo "building coredns ${version} (first time only; this takes minutes)" >&2
  tmp="$(mktemp "$cache/.coredns.XXXXXX")"
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "-s -w" -o "$tmp" github.com/coredns/coredns) >&2 || { rm -f "$tmp"; exit 1; }
  # Renamed into place only once complete, so an interrupted build is never taken for a cached one.
  mv "$tmp" "$cache/coredns"
fi
echo "$cache"
