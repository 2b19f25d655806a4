#!/usr/bin/env bash
# Builds prometheus-operator from its official Go module pinned in go.mod, caches it under the
# user's cache directory keyed by version, and prints the directory holding its binaries
# (static, CGO off: `operator`, `admission-webhook`, `prometheus-config-reloader`) beside the
# module's own install manifests: `crds/` (every CRD of example/prometheus-operator-crd), `rbac/`
# (example/rbac/prometheus-operator: the Deployment, its ServiceAccount, ClusterRole and binding,
# Service and ServiceMonitor) and `webhook/` (example/admission-webhook). `previous/`
# in it holds the same for the release before (previous/go.mod: `operator`, `crds/`, `rbac/`),
# for the upgrade test. The node tier installs them as bundles (tests/tests/node/operators*.rs).
#
#   GANTRY_PROMETHEUS_OPERATOR_DIR=/path  skips the build and uses that directory.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

check_release() {
  [[ -x "$1/operator" ]] && compgen -G "$1/crds/*.yaml" >/dev/null && compgen -G "$1/rbac/*.yaml" >/dev/null
}
check() {
  check_release "$1" && check_release "$1/previous" &&
    [[ -x "$1/admission-webhook" && -x "$1/prometheus-config-reloader" ]] &&
    compgen -G "$1/webhook/*.yaml" >/dev/null
}

if [[ -n "${GANTRY_PROMETHEUS_OPERATOR_DIR:-}" ]]; then
  check "$GANTRY_PROMETHEUS_OPERATOR_DIR" || {
    echo "GANTRY_PROMETHEUS_OPERATOR_DIR=$GANTRY_PROMETHEUS_OPERATOR_DIR lacks an executable operator, admission-webhook or prometheus-config-reloader, crds/*.yaml, rbac/*.yaml, webhook/*.yaml, or previous/ with its operator, crds/ and rbac/" >&2
    exit 1
  }
  echo "$GANTRY_PROMETHEUS_OPERATOR_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
module=github.com/prometheus-operator/prometheus-operator

# build_release MODULE_DIR CACHE_ROOT [BINARY...]: builds the release MODULE_DIR/go.mod pins
# into CACHE_ROOT/prometheus-operator-VERSION (the operator and each further BINARY), with the
# manifests, and sets `cache` to that directory.
build_release() {
  here="$1"
  local root="$2"
  shift 2
  local version
  version="$(version_of "$module")"
  [[ -n "$version" ]] || { echo "cannot read the prometheus-operator version from $here/go.mod" >&2; return 1; }
  cache="$root/prometheus-operator-${version}"
  mkdir -p "$cache"
  copy_manifests "$version" example/prometheus-operator-crd crds
  copy_manifests "$version" example/rbac/prometheus-operator rbac
  # Stamped as the operator's own release builds do (its Makefile), so `--version` names it.
  local ldflags="-X github.com/prometheus/common/version.Version=${version#v} -X github.com/prometheus/common/version.Branch=${version}"
  local binary
  for binary in operator "$@"; do
    go_build "$cache" "$binary" "$module/cmd/$binary" "$ldflags"
  done
  check_release "$cache" || { echo "$cache is incomplete" >&2; return 1; }
}

# The manifests come from the same module source the binaries are built from.
copy_manifests() {
  local version="$1" from="$2" to="$3"
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

root="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/prometheus-operator"
tools="$here"
build_release "$tools/previous" "$root"
previous="$cache"
build_release "$tools" "$root" admission-webhook prometheus-config-reloader
here="$tools"
copy_manifests "$(version_of "$module")" example/admission-webhook webhook
ln -sfn "$previous" "$cache/previous"
check "$cache" || { echo "$cache is incomplete" >&2; exit 1; }
echo "$cache"
