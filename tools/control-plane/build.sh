#!/usr/bin/env bash
# Builds the control-plane binaries from the official Go modules pinned in go.mod, caches them
# under the user's cache directory keyed by version, and prints the directory holding them.
#
#   build.sh            kube-apiserver and etcd (what the tests need)
#   build.sh kubectl    also kubectl (for machines without one)
#   build.sh node       also what a node cluster runs: kube-controller-manager, kube-scheduler,
#                       kubelet, kube-proxy (CoreDNS is built by tools/coredns/build.sh)
#   build.sh apply-floor  also apply-floor (./cmd/apply-floor, the apply benchmark's floor); it
#                       is built again whenever its source is newer than the binary
#
#   GANTRY_CONTROL_PLANE_DIR=/path/with/binaries  skips the build and uses those binaries.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node_set=(kube-controller-manager kube-scheduler kubelet kube-proxy)
wanted=(kube-apiserver etcd)
for arg in "$@"; do
  if [[ "$arg" == node ]]; then wanted+=("${node_set[@]}"); else wanted+=("$arg"); fi
done

if [[ -n "${GANTRY_CONTROL_PLANE_DIR:-}" ]]; then
  for bin in "${wanted[@]}"; do
    [[ -x "$GANTRY_CONTROL_PLANE_DIR/$bin" ]] || { echo "GANTRY_CONTROL_PLANE_DIR=$GANTRY_CONTROL_PLANE_DIR has no executable $bin" >&2; exit 1; }
  done
  echo "$GANTRY_CONTROL_PLANE_DIR"
  exit 0
fi

# shellcheck disable=SC1091
source "$here/../lib.sh"
k8s_version="$(version_of k8s.io/kubernetes)"
etcd_version="$(version_of go.etcd.io/etcd/server/v3)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || { echo "cannot read versions from $here/go.mod" >&2; exit 1; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/control-plane/kubernetes-${k8s_version}-etcd-${etcd_version}"
mkdir -p "$cache"

version_flags="-X k8s.io/component-base/version.gitVersion=${k8s_version}"
version_flags+=" -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${k8s_version#v}")"
version_flags+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"${k8s_version#v}")"
version_flags+=" -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"

build() { go_build "$cache" "$@"; }

for bin in "${wanted[@]}"; do
  case "$bin" in
    kube-apiserver) build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$version_flags" ;;
    etcd) build etcd go.etcd.io/etcd/server/v3 "" ;;
    apply-floor)
      [[ -x "$cache/apply-floor" && ! "$here/cmd/apply-floor/main.go" -nt "$cache/apply-floor" ]] || rm -f "$cache/apply-floor"
      build apply-floor ./cmd/apply-floor "" ;;
    kubectl | kube-controller-manager | kube-scheduler | kubelet | kube-proxy)
      build "$bin" "k8s.io/kubernetes/cmd/$bin" "$version_flags" ;;
    *) echo "unknown binary $bin (known: kube-apiserver etcd kubectl apply-floor ${node_set[*]}; node for the node set)" >&2; exit 2 ;;
  esac
done
echo "$cache"
