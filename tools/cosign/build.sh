#!/usr/bin/env bash
# Builds the cosign CLI from its official Go module pinned in tools/shared/go.mod, caches it under the user's
# cache directory keyed by version, and prints the directory holding the `cosign` binary. The
# tests sign bundle images with it.
#
#   GANTRY_COSIGN_DIR=/path/with/binary  skips the build and uses that binary.
set -euo pipefail

# The module pinning the version: tools/shared, which several tools share.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../shared" && pwd)"

if [[ -n "${GANTRY_COSIGN_DIR:-}" ]]; then
  [[ -x "$GANTRY_COSIGN_DIR/cosign" ]] || { echo "GANTRY_COSIGN_DIR=$GANTRY_COSIGN_DIR has no executable cosign" >&2; exit 1; }
  echo "$GANTRY_COSIGN_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
version="$(version_of github.com/sigstore/cosign/v3)"
[[ -n "$version" ]] || { echo "cannot read the cosign version from $here/go.mod" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/cosign/cosign-${version}-$(module_key)"
mkdir -p "$cache"
# The version is stamped as cosign's own release builds do, so `cosign version` names it.
go_build "$cache" cosign github.com/sigstore/cosign/v3/cmd/cosign \
  "-X sigs.k8s.io/release-utils/version.gitVersion=${version}"
echo "$cache"
