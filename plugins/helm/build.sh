#!/usr/bin/env bash
# Builds gantry-helm-plugin from this directory's module, caches it under the user's cache
# directory keyed by its version and sources, and prints the directory holding the
# `gantry-helm-plugin` binary.
#
#   GANTRY_HELM_PLUGIN_DIR=/path/with/binary  skips the build and uses that binary.
#   GANTRY_CHECK_ONLY=1                       only says whether it is cached (exit 1 when not).
set -euo pipefail

# The plugin's own module: lib.sh's helpers read go.mod here and build here.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ -n "${GANTRY_HELM_PLUGIN_DIR:-}" ]]; then
  [[ -x "$GANTRY_HELM_PLUGIN_DIR/gantry-helm-plugin" ]] || {
    echo "GANTRY_HELM_PLUGIN_DIR=$GANTRY_HELM_PLUGIN_DIR has no executable gantry-helm-plugin" >&2
    exit 1
  }
  echo "$GANTRY_HELM_PLUGIN_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../../tools/lib.sh"
version="$(sed -n 's/^const version = "\(.*\)"$/\1/p' "$here/main.go")"
[[ -n "$version" ]] || { echo "cannot read the plugin's version from $here/main.go" >&2; exit 1; }
helm_version="$(version_of helm.sh/helm/v4)"
[[ -n "$helm_version" ]] || { echo "cannot read the helm version from $here/go.mod" >&2; exit 1; }

# The plugin's sources change more often than its dependencies, so the key covers both:
# go.mod, go.sum and every non-test Go file, names included.
plugin_key() {
  (cd "$here" && find . -maxdepth 1 \( -name go.mod -o -name go.sum -o -name '*.go' \) ! -name '*_test.go' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/helm-plugin/gantry-helm-plugin-${version}-$(plugin_key)"
mkdir -p "$cache"
# Stamped as tools/helm/build.sh stamps helm, so that .Capabilities.HelmVersion names the
# Helm release the plugin renders with.
go_build "$cache" gantry-helm-plugin . \
  "-X helm.sh/helm/v4/internal/version.version=${helm_version} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
echo "$cache"
