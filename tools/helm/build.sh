#!/usr/bin/env bash
# Builds the helm CLI from its official Go module pinned in tools/shared/go.mod, caches it under the user's
# cache directory keyed by version, and prints the directory holding the `helm` binary. CI lints
# and renders charts/gantry with it; the node tier installs Gantry with `helm install`.
#
#   GANTRY_HELM_DIR=/path/with/binary  skips the build and uses that binary.
set -euo pipefail

# The module pinning the version: tools/shared, which several tools share.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../shared" && pwd)"

if [[ -n "${GANTRY_HELM_DIR:-}" ]]; then
  [[ -x "$GANTRY_HELM_DIR/helm" ]] || { echo "GANTRY_HELM_DIR=$GANTRY_HELM_DIR has no executable helm" >&2; exit 1; }
  echo "$GANTRY_HELM_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
version="$(version_of helm.sh/helm/v3)"
[[ -n "$version" ]] || { echo "cannot read the helm version from $here/go.mod" >&2; exit 1; }
# Stamped as helm's own Makefile does: `helm version` names the release, and the Kubernetes
# version that `helm template` and `helm lint` assume follows the client-go helm is built with.
client_go="$(version_of k8s.io/client-go)"
IFS=. read -r kube_major kube_minor _ <<<"${client_go#v}"
kube_major=$((kube_major + 1))
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/helm/helm-${version}-$(module_key)"
mkdir -p "$cache"
go_build "$cache" helm helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=${version} -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=${kube_major} -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${kube_minor} \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=${kube_major} -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${kube_minor}"
echo "$cache"
