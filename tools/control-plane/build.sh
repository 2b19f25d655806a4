#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the official Go modules pinned in go.mod and caches them
# under the user's cache directory, keyed by version. Prints the directory holding the binaries.
#
#   GANTRY_CONTROL_PLANE_DIR=/path/with/binaries  skips the build and uses those binaries.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ -n "${GANTRY_CONTROL_PLANE_DIR:-}" ]]; then
  for bin in kube-apiserver etcd; do
    [[ -x "$GANTRY_CONTROL_PLANE_DIR/$bin" ]] || { echo "GANTRY_CONTROL_PLANE_DIR=$GANTRY_CONTROL_PLANE_DIR has no executable $bin" >&2; exit 1; }
  done
  echo "$GANTRY_CONTROL_PLANE_DIR"
  exit 0
fi

version_of() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/go.mod"; }
k8s_version="$(version_of k8s.io/kubernetes)"
etcd_version="$(version_of go.etcd.io/etcd/server/v3)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || { echo "cannot read versions from $here/go.mod" >&2; exit 1; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/gantry/control-plane/kubernetes-${k8s_version}-etcd-${etcd_version}"
if [[ -x "$cache/kube-apiserver" && -x "$cache/etcd" ]]; then
  echo "$cache"
  exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=${k8s_version}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${k8s_version#v}")"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"${k8s_version#v}")"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"

cd "$here"
echo "building kube-apiserver ${k8s_version} and etcd ${etcd_version} into $cache (first time only; takes minutes)" >&2
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3 >&2
# Rename into place only when both built, so an interrupted build is never mistaken for a cached one.
mv "$tmp/etcd" "$cache/etcd"
mv "$tmp/kube-apiserver" "$cache/kube-apiserver"
echo "$cache"
