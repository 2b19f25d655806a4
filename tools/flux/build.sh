#!/usr/bin/env bash
# Builds Flux's controllers from their official Go modules, copies their CRDs next to them,
# caches them under the user's cache directory keyed by version, and prints the directory
# holding them:
#
#   DIR/source-controller  DIR/kustomize-controller  [DIR/helm-controller]  DIR/crds/*.yaml
#
# source-controller and kustomize-controller are pinned in go.mod; helm-controller, of the same
# Flux release, in helm-controller/go.mod (a module of its own). Without arguments it builds
# source- and kustomize-controller; with arguments, the controllers named:
#
#   bash tools/flux/build.sh                                      # source- and kustomize-controller
#   bash tools/flux/build.sh source-controller helm-controller    # what bench/helm runs
#   bash tools/flux/build.sh helm-controller                      # only helm-controller
#
# so that only bench/helm pays for helm-controller. The benchmarks (bench/flux/lib.sh) run them
# against the local API server as Gantry's peer.
#
#   GANTRY_FLUX_DIR=/path/with/binaries  skips the build and uses those binaries and CRDs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
flux_here="$here"
wanted=("$@")
((${#wanted[@]})) || wanted=(source-controller kustomize-controller)
for bin in "${wanted[@]}"; do
  case "$bin" in
    source-controller | kustomize-controller | helm-controller) ;;
    *) echo "unknown controller $bin (known: source-controller kustomize-controller helm-controller)" >&2; exit 2 ;;
  esac
done

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

# module_of NAME: the Go module NAME is built from; dir_of NAME: the directory of its go.mod.
module_of() { echo "github.com/fluxcd/$1"; }
dir_of() { if [[ "$1" == helm-controller ]]; then echo "$flux_here/helm-controller"; else echo "$flux_here"; fi; }

for bin in "${wanted[@]}"; do
  here="$(dir_of "$bin")"
  if [[ "$bin" == helm-controller ]]; then
    # Kept in the same directory as the other two (the benchmarks run them together), stamped
    # with its version and its module's go.sum, since the directory's name does not say them.
    helm_version="$(version_of "$(module_of "$bin")")"
    [[ -n "$helm_version" ]] || { echo "cannot read the helm-controller version from $here/go.mod" >&2; exit 1; }
    stamp="$helm_version-$(module_key)"
    if [[ "$(cat "$cache/helm-controller.version" 2>/dev/null || true)" != "$stamp" ]]; then
      rm -f "$cache/helm-controller"
      rm -rf "$cache/crds/.helm-controller"
    fi
  fi
  go_build "$cache" "$bin" "$(module_of "$bin")"
  [[ "$bin" != helm-controller ]] || echo "$stamp" > "$cache/helm-controller.version"
done

# The CRDs of each controller built, copied once (a marker file per controller in crds/).
mkdir -p "$cache/crds"
for bin in "${wanted[@]}"; do
  [[ -e "$cache/crds/.$bin" ]] && continue
  dir="$(cd "$(dir_of "$bin")" && go list -m -f '{{.Dir}}' "$(module_of "$bin")")"
  for crd in "$dir"/config/crd/bases/*.yaml; do
    tmp="$(mktemp "$cache/crds/.crd.XXXXXX")"
    cp "$crd" "$tmp"
    chmod 0644 "$tmp"
    mv "$tmp" "$cache/crds/$(basename "$crd")"
  done
  touch "$cache/crds/.$bin"
done
echo "$cache"
