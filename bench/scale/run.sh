#!/usr/bin/env bash
# Scale: 200 bundles of 20 objects each. Measures the time until all are Ready, the
# provisioner's peak RSS, and the write requests the API server receives during 60 s of steady
# state afterwards (Lease renewals of leader election excluded; there should be none else).
#
#   bash bench/scale/run.sh            # BUNDLES=200 OBJECTS=20 STEADY=60
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck disable=SC1091
source bench/lib.sh

BUNDLES="${BUNDLES:-200}"
OBJECTS="${OBJECTS:-20}"
STEADY="${STEADY:-60}"
work="$(mktemp -d)"
trap 'rm -rf "$work"; bench_down' EXIT

bench_up "$work/env"
run_id="$(date +%s)"

# One image of $OBJECTS ConfigMaps without a namespace; each bundle installs it into its own
# install namespace.
mkdir -p "$work/bundle/manifests"
python3 - "$work/bundle/manifests" "$OBJECTS" <<'PY'
import sys
d, n = sys.argv[1], int(sys.argv[2])
with open(f"{d}/objects.yaml", "w") as f:
    f.write("---\n".join(f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{i}\ndata:\n  key: value-{i}\n" for i in range(n)))
PY
kubectl-bundle push "$work/bundle" "$GANTRY_REGISTRY/bench/scale:$run_id" --plain-http >/dev/null

manifest="$work/bundles.yaml"
: > "$manifest"
for i in $(seq 1 "$BUNDLES"); do
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scale-%s-%s\n---\n' "$run_id" "$i" >> "$manifest"
done
kubectl apply -f "$manifest" >/dev/null
: > "$manifest"
for i in $(seq 1 "$BUNDLES"); do
  printf 'apiVersion: gantry.dev/v1alpha1\nkind: Bundle\nmetadata:\n  name: scale-%s-%s\nspec:\n  image: %s/bench/scale:%s\n  installNamespace: scale-%s-%s\n---\n' \
    "$run_id" "$i" "$GANTRY_REGISTRY" "$run_id" "$run_id" "$i" >> "$manifest"
done

writes() {
  kubectl get --raw /metrics | python3 -c '
import re, sys
total = 0
for line in sys.stdin:
    if not line.startswith("apiserver_request_total{"):
        continue
    labels = dict(re.findall(r"(\w+)=\"([^\"]*)\"", line))
    if labels.get("verb") in ("POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE") and labels.get("resource") not in ("leases", "tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews"):
        total += float(line.rsplit(" ", 1)[1])
print(int(total))'
}

echo "==> creating $BUNDLES bundles of $OBJECTS objects"
initial="$(writes)"
start="$(now)"
kubectl apply -f "$manifest" >/dev/null
deadline=$(( $(date +%s) + 600 ))
while true; do
  ready="$(kubectl get bundles -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$' || true)"
  [[ "$ready" -ge "$BUNDLES" ]] && break
  (( $(date +%s) < deadline )) || { echo "only $ready of $BUNDLES Ready after 600 s" >&2; exit 1; }
  sleep 0.5
done
all_ready="$(python3 -c "print($(now) - $start)")"

echo "==> all Ready in ${all_ready}s; measuring ${STEADY}s of steady state"
before="$(writes)"
sleep "$STEADY"
after="$(writes)"
# The two `kubectl get --raw /metrics` calls above are reads; nothing else runs.
steady_writes=$(( after - before ))

printf '\n%-44s %s\n' "bundles x objects" "${BUNDLES} x ${OBJECTS}"
printf '%-44s %.1f s (target 60 s)\n' "time to all Ready" "$all_ready"
printf '%-44s %s MiB (target 100 MiB)\n' "provisioner peak RSS" "$(peak_rss_mib "$GANTRY_PROVISIONER_PID")"
printf '%-44s %s\n' "write requests while installing (for scale)" "$(( before - initial ))"
printf '%-44s %s (target 0)\n' "write requests in ${STEADY}s of steady state" "$steady_writes"

# Flux's column (FLUX=0 leaves it out): the same image as OCIRepository + Kustomization pairs,
# after Gantry's figures, on the same API server (see bench/flux/lib.sh).
if [[ "${FLUX:-1}" == 1 ]]; then
  # shellcheck disable=SC1091
  source bench/flux/lib.sh
  printf '\n'
  flux_scale "$work" "$GANTRY_REGISTRY/bench/scale:$run_id" "$BUNDLES" "$run_id"
fi
