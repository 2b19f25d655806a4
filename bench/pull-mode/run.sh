#!/usr/bin/env bash
# Pull modes: a Bundle from creation to Ready with `pullMode: Direct` (the provisioner pulls
# from the registry) against `pullMode: Node` (an unpack Pod: the node's container runtime
# pulls, the unpack program validates and stores), in the same run, on the node tier: Gantry
# runs as Pods from its release images on a real single-node cluster on this machine. Each
# bundle has content of its own, so nothing comes from a cache; a first round warms up.
#
#   sudo bash bench/pull-mode/run.sh          # ROUNDS=5 by default
#
# Needs root and what `bash .ci/run` installs (containerd, runc, the CNI plugins, umoci,
# skopeo, docker-registry, buildah, ...); builds Gantry's images on first use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if [[ "$(id -u)" != 0 ]]; then
  echo "the node tier needs root: sudo bash $0" >&2
  exit 1
fi
GANTRY_CONTROL_PLANE_DIR="${GANTRY_CONTROL_PLANE_DIR:-$(bash tools/control-plane/build.sh node)}"
GANTRY_COREDNS_DIR="${GANTRY_COREDNS_DIR:-$(bash tools/coredns/build.sh)}"
export GANTRY_CONTROL_PLANE_DIR GANTRY_COREDNS_DIR
export GANTRY_BENCH_ROUNDS="${ROUNDS:-5}"

echo "==> the node tier with Gantry's release images, $GANTRY_BENCH_ROUNDS rounds per mode" >&2
cargo test -p gantry-tests --test node -- \
  --ignored --exact pull::benchmark_ready_through_node_versus_direct --nocapture
