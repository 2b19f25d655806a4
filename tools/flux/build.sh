#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller from their official Go modules pinned
# in go.mod, copies their CRDs next to them, caches both under the user's cache directory keyed
# by version, and prints the directory holding them:
#
#   DIR/source-controller  DIR/kustomize-controller  DIR/crds/*.yaml
#
# The benchmarks (bench/flux/lib.sh) run them against the local API server as Gantry's peer.
#
#   GANTRY_FLUX_DIR=/path/with/binaries  skips the build and uses those binaries and CRDs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wanted=(source-controller kustomize-controller)

if [[ -n "${GANTRY_FLUX_DIR:-}" ]]; then
  for bin in "${wanted[@]}"; do
    [[ -x "$GANTRY_FLUX_DIR/$bin" ]] || { echo "GANTRY_FLUX_DIR=$GANTRY_FLUX_DIR has no executable $bin" >&2; exit 1; }
  done
  [[ -d "$GANTRY_FLUX_DIR/crds" ]] || { echo "GANTRY_FLUX_DIR=$GANTRY_FLUX_DIR has no crds directory" >&2; exit 1; }
  echo "$GANTRY_FLUX_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
source_version="$(version_of github.com/fluxcd/source-controller)"
kustomize_version="$(version_of github.com/fluxcd/kustomize-controller)"
[[ -n "$source_version" && -n "$kustomize_version" ]] || { echo "cannot read versions from $here/go.mod" >&2; exit 1; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/flux/source-controller-${source_version}-kustomize-controller-${kustomize_version}"
mkdir -p "$cache"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

build() { go_build "$cache" "$@"; }

build source-controller github.com/fluxcd/source-controller
build kustomize-controller github.com/fluxcd/kustomize-controller

if [[ ! -d "$cache/crds" ]]; then
  tmp="$(mktemp -d "$cache/.crds.XXXXXX")"
  for module in github.com/fluxcd/source-controller github.com/fluxcd/kustomize-controller; do
    dir="$(cd "$here" && go list -m -f '{{.Dir}}' "$module")"
    cp "$dir"/config/crd/bases/*.yaml "$tmp/"
  done
  chmod 0644 "$tmp"/*.yaml
  mv "$tmp" "$cache/crds"
fi
echo "$cache"
