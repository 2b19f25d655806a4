#!/usr/bin/env bash
# Builds actionlint from its official Go module pinned in go.mod, caches it under the user's
# cache directory keyed by version, and prints the directory holding the `actionlint` binary.
# scripts/test checks .github/workflows with it.
#
#   GANTRY_ACTIONLINT_DIR=/path/with/binary  skips the build and uses that binary.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ -n "${GANTRY_ACTIONLINT_DIR:-}" ]]; then
  [[ -x "$GANTRY_ACTIONLINT_DIR/actionlint" ]] || { echo "GANTRY_ACTIONLINT_DIR=$GANTRY_ACTIONLINT_DIR has no executable actionlint" >&2; exit 1; }
  echo "$GANTRY_ACTIONLINT_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
version="$(version_of github.com/rhysd/actionlint)"
[[ -n "$version" ]] || { echo "cannot read the actionlint version from $here/go.mod" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/actionlint/actionlint-${version}"
mkdir -p "$cache"
go_build "$cache" actionlint github.com/rhysd/actionlint/cmd/actionlint \
  "-X github.com/rhysd/actionlint.version=${version}"
echo "$cache"
