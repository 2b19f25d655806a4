#!/usr/bin/env bash
# Memory on real-world-shaped bundles: installs, one after another, a monitoring operator's CRD
# set (five CRDs of 0.5 to 1.2 MB, about 4 MB in all, like prometheus-operator's) and a
# 60-object install with three large CRDs (about 2 MB, like Argo CD's), and reports the
# provisioner's peak RSS (VmHWM) and its settled RSS: VmRSS once both are Ready and RSS has
# stopped changing (within SETTLE_MIB over SETTLE_SAMPLES samples a second apart).
#
#   bash bench/memory/run.sh           # SETTLE_SAMPLES=10 SETTLE_MIB=0.5 SETTLE_DEADLINE=180
#   bash bench/memory/run.sh --provisioner-arg ...   # extra provisioner flags (repeatable)
#   MEMORY_SCALE=0.02 bash bench/memory/run.sh       # CRDs 50 times smaller (bench/smoke)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck disable=SC1091
source bench/lib.sh

SETTLE_SAMPLES="${SETTLE_SAMPLES:-10}"
SETTLE_MIB="${SETTLE_MIB:-0.5}"
SETTLE_DEADLINE="${SETTLE_DEADLINE:-180}"
provisioner_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --provisioner-arg) provisioner_args+=("$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d)"
trap 'bench_down; rm -rf "$work"' EXIT

bench_up "$work/env" "${provisioner_args[@]}"
trap 'bench_down; rm -rf "$work"' EXIT
run_id="$(date +%s)"
pid="$GANTRY_PROVISIONER_PID"
python3 bench/memory/gen.py "$work" "$run_id"

rss_mib() { awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"; }

printf '%-34s %s MiB\n' "provisioner RSS at start" "$(rss_mib)"
declare -A took
for bundle in operator gitops; do
  kubectl-bundle push "$work/$bundle" "$GANTRY_REGISTRY/bench/memory-$bundle:$run_id" --plain-http >/dev/null
  start="$(now)"
  printf 'apiVersion: gantry.dev/v1alpha1\nkind: Bundle\nmetadata:\n  name: %s-%s\nspec:\n  image: %s/bench/memory-%s:%s\n' \
    "$bundle" "$run_id" "$GANTRY_REGISTRY" "$bundle" "$run_id" | kubectl apply -f - >/dev/null
  wait_ready "$bundle-$run_id" 600
  took[$bundle]="$(python3 -c "print(f'{$(now) - $start:.1f}')")"
  printf '%-34s %s MiB (Ready in %s s)\n' "RSS after $bundle" "$(rss_mib)" "${took[$bundle]}"
done

# Settled: RSS has stayed within SETTLE_MIB for SETTLE_SAMPLES samples.
samples=()
deadline=$(( $(date +%s) + SETTLE_DEADLINE ))
while true; do
  samples+=("$(rss_mib)")
  if (( ${#samples[@]} >= SETTLE_SAMPLES )); then
    window=("${samples[@]: -$SETTLE_SAMPLES}")
    if python3 -c "import sys; v = [float(x) for x in sys.argv[2:]]; sys.exit(0 if max(v) - min(v) <= float(sys.argv[1]) else 1)" "$SETTLE_MIB" "${window[@]}"; then
      break
    fi
  fi
  (( $(date +%s) < deadline )) || { echo "RSS did not settle within ${SETTLE_DEADLINE}s: ${samples[*]}" >&2; break; }
  sleep 1
done

echo
printf '%-34s %s\n' "bundles" "operator (5 CRDs, ~4 MB), gitops (60 objects, ~2 MB)${MEMORY_SCALE:+, CRDs scaled by $MEMORY_SCALE}"
printf '%-34s %s MiB (target 64 MiB)\n' "provisioner peak RSS (VmHWM)" "$(peak_rss_mib "$pid")"
printf '%-34s %s MiB (target 48 MiB; settled after %s s)\n' "provisioner settled RSS (VmRSS)" "$(rss_mib)" "${#samples[@]}"
printf '%-34s %s\n' "load (uptime)" "$(uptime | sed 's/.*load average: //')"
