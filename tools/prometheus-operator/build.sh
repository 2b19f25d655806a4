#!/usr/bin/env bash
# Builds prometheus-operator from its official Go module pinned in go.mod, caches it under the
# user's cache directory keyed by version, and prints the directory holding the `operator` binary
# (static, CGO off) beside the module's own install manifests: `crds/` (every CRD of
# example/prometheus-operator-crd) and `rbac/` (example/rbac/prometheus-operator: the Deployment,
# its ServiceAccount, ClusterRole and binding, Service and ServiceMonitor). The node tier installs
# them as a bundle (tests/tests/node/operators.rs).
#
#   GANTRY_PROMETHEUS_OPERATOR_DIR=/path  skips the build and uses that directory.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

check() {
  [[ -x "$1/operator" ]] && compgen -G "$1/crds/*.yaml" >/dev/null && compgen -G "$1/rbac/*.yaml" >/dev/null
}

if [[ -n "${GANTRY_PROMETHEUS_OPERATOR_DIR:-}" ]]; then
  check "$GANTRY_PROMETHEUS_OPERATOR_DIR" || {
    echo "GANTRY_PROMETHEUS_OPERATOR_DIR=$GANTRY_PROMETHEUS_OPERATOR_DIR lacks an executable operator, crds/*.yaml or rbac/*.yaml" >&2
    exit 1
  }
  echo "$GANTRY_PROMETHEUS_OPERATOR_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
module=github.com/prometheus-operator/prometheus-operator
version="$(version_of "$module")"
[[ -n "$version" ]] || { echo "cannot read the prometheus-operator version from $here/go.mod" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/prometheus-operator/prometheus-operator-${version}"
mkdir -p "$cache"

# The manifests come from the same module source the binary is built from.
copy_manifests() {
  local from="$1" to="$2"
  [[ -d "$cache/$to" ]] && return 0
  local source
  source="$(cd "$here" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$module@$version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -d "$source/$from" ]] || { echo "no $from in the module source ($source)" >&2; return 1; }
  local tmp
  tmp="$(mktemp -d "$cache/.$to.XXXXXX")"
  cp "$source/$from"/*.yaml "$tmp/"
  chmod 0644 "$tmp"/*.yaml
  chmod 0755 "$tmp"
  mv "$tmp" "$cache/$to"
}
copy_manifests example/prometheus-operator-crd crds
copy_manifests example/rbac/prometheus-operator rbac

# Stamped as the operator's own release builds do (its Makefile), so `operator --version` names it.
go_build "$cache" operator "$module/cmd/operator" \
  "-X github.com/prometheus/common/version.Version=${version#v} -X github.com/prometheus/common/version.Branch=${version}"
check "$cache" || { echo "$cache is incomplete" >&2; exit 1; }
echo "$cache"
