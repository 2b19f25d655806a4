#!/usr/bin/env bash
# Builds metrics-server from its official Go module pinned in tools/shared/go.mod, caches it under the user's
# cache directory keyed by version, and prints the directory holding the static `metrics-server`
# binary (CGO off) beside `components.yaml`: the release manifest (RBAC, Service, Deployment,
# APIService v1beta1.metrics.k8s.io) rendered from the module's own manifests/overlays/release
# with `kubectl kustomize`, as upstream's Makefile renders the components.yaml it publishes.
# manifests/base alone is not appliable: its Deployment gets its selector and labels from the
# kustomization's commonLabels. The node tier installs it as a bundle
# (tests/tests/node/metrics_server.rs).
#
#   GANTRY_METRICS_SERVER_DIR=/path  skips the build and uses that directory.
set -euo pipefail

# The module pinning the version: tools/shared, which several tools share.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../shared" && pwd)"

check() { [[ -x "$1/metrics-server" && -s "$1/components.yaml" ]]; }

if [[ -n "${GANTRY_METRICS_SERVER_DIR:-}" ]]; then
  check "$GANTRY_METRICS_SERVER_DIR" || {
    echo "GANTRY_METRICS_SERVER_DIR=$GANTRY_METRICS_SERVER_DIR lacks an executable metrics-server or components.yaml" >&2
    exit 1
  }
  echo "$GANTRY_METRICS_SERVER_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
module=sigs.k8s.io/metrics-server
version="$(version_of "$module")"
[[ -n "$version" ]] || { echo "cannot read the metrics-server version from $here/go.mod" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/metrics-server/metrics-server-${version}-$(module_key)"
mkdir -p "$cache"

# Stamped as upstream's Makefile does, so `--version` and the logs name the release.
go_build "$cache" metrics-server "$module/cmd/metrics-server" "-X k8s.io/client-go/pkg/version.gitVersion=${version}"

if [[ ! -s "$cache/components.yaml" ]]; then
  # The manifests come from the same module source the binary is built from.
  source_dir="$(cd "$here" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$module@$version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -d "$source_dir/manifests/overlays/release" ]] || { echo "no manifests/overlays/release in the module source ($source_dir)" >&2; exit 1; }
  kubectl=kubectl
  command -v kubectl >/dev/null || kubectl="$(GANTRY_CONTROL_PLANE_DIR= bash "$here/../control-plane/build.sh" kubectl)/kubectl"
  tmp="$(mktemp "$cache/.components.yaml.XXXXXX")"
  "$kubectl" kustomize "$source_dir/manifests/overlays/release" >"$tmp" || { rm -f "$tmp"; exit 1; }
  chmod 0644 "$tmp"
  mv "$tmp" "$cache/components.yaml"
fi
check "$cache" || { echo "$cache is incomplete" >&2; exit 1; }
echo "$cache"
