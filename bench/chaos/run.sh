#!/usr/bin/env bash
# The chaos run: 100 bundles created, moved to new content, approved and deleted while the
# provisioner, the storage server, the registry, kube-apiserver and etcd are killed and
# restarted; then it checks that every live bundle is Ready at its latest digest, nothing of a
# deleted bundle is left, nothing of a live one is missing, storage holds exactly the current
# tarballs and no content ran without its approval. Loopback only; bounded in time.
#
#   bash bench/chaos/run.sh                                  # 100 bundles, 120 s of faults
#   bash bench/chaos/run.sh --bundles 30 --duration 60       # any flag of gantry-chaos --help
#   bash bench/chaos/run.sh --replicas 3                     # three sharded provisioner replicas
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

for program in go docker-registry; do
  command -v "$program" >/dev/null || { echo "missing $program: run 'bash .ci/run' once" >&2; exit 1; }
done
GANTRY_CONTROL_PLANE_DIR="$(bash tools/control-plane/build.sh)"
export GANTRY_CONTROL_PLANE_DIR
# BENCH_PROFILE=debug (bench/smoke) runs the debug builds; BENCH_PREBUILT=1 does not build.
profile="${BENCH_PROFILE:-release}"
if [[ -z "${BENCH_PREBUILT:-}" ]]; then
  echo "==> cargo build ($profile: Gantry's binaries and gantry-chaos)" >&2
  if [[ "$profile" == release ]]; then
    cargo build --release --quiet --workspace --bins
  else
    cargo build --quiet --workspace --bins
  fi
fi
export GANTRY_BINARIES_BUILT=1
state=target/chaos
[[ "$profile" == release ]] || state="target/chaos-$profile"
exec "target/$profile/gantry-chaos" --state-dir "$state" "$@"
