#!/usr/bin/env bash
# Apply speed: a bundle of 1,000 objects (ConfigMaps, Secrets, Services, Deployments, a CRD and
# its custom resources), from creating the Bundle to Ready, against `kubectl apply -f DIR`,
# `kubectl apply --server-side -f DIR` and Flux (source-controller + kustomize-controller, an
# OCIRepository + a Kustomization on an image pushed exactly as Gantry's), on the same API
# server in the same run; and against the floor: how fast the API server itself accepts the
# same objects by server-side apply (tools/control-plane/cmd/apply-floor, best of several
# concurrencies), and a second floor that dry-runs every object before writing any (what a tool
# must send that never leaves part of a bundle written when the API server refuses an object,
# as Gantry does). Each tool gets its own namespace and CRD group, so none finds the others'
# objects. For Gantry and Flux it also reports CPU seconds, peak RSS and the requests the API
# server served meanwhile (apiserver_request_total before/after).
#
#   bash bench/apply/run.sh            # OBJECTS=1000 FLOOR_CONCURRENCY=1,8,32,64 FLUX=1
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck disable=SC1091
source bench/lib.sh
# shellcheck disable=SC1091
source bench/flux/lib.sh

OBJECTS="${OBJECTS:-1000}"
FLOOR_CONCURRENCY="${FLOOR_CONCURRENCY:-1,8,32,64}"
FLUX="${FLUX:-1}"
work="$(mktemp -d)"
trap 'flux_down; bench_down; rm -rf "$work"' EXIT

# Built before anything is timed (the first time takes minutes).
floor_dir="$(apply_floor_dir)"
[[ "$FLUX" == 1 ]] && bash tools/flux/build.sh >/dev/null

# generate DIR NAMESPACE GROUP: a bundle of about $OBJECTS objects in DIR/manifests.
generate() {
  local dir="$1/manifests" ns="$2" group="$3" per=$(( (OBJECTS - 2) / 5 ))
  mkdir -p "$dir"
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$ns" > "$dir/00-namespace.yaml"
  cat > "$dir/01-crd.yaml" <<CRD
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.$group
spec:
  group: $group
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
CRD
  python3 - "$dir" "$ns" "$group" "$per" <<'PY'
import sys
d, ns, group, per = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def write(name, docs):
    with open(f"{d}/{name}", "w") as f:
        f.write("---\n".join(docs))
write("10-configmaps.yaml", [f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{i}\n  namespace: {ns}\ndata:\n  key: value-{i}\n  other: \"{i * 7}\"\n" for i in range(per)])
write("20-secrets.yaml", [f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-{i}\n  namespace: {ns}\nstringData:\n  password: pass-{i}\n" for i in range(per)])
write("30-services.yaml", [f"apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: {ns}\nspec:\n  selector:\n    app: app-{i}\n  ports:\n  - port: 80\n    targetPort: 8080\n" for i in range(per)])
write("40-deployments.yaml", [f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: app-{i}\n  template:\n    metadata:\n      labels:\n        app: app-{i}\n    spec:\n      containers:\n      - name: app\n        image: registry.example/app:{i}\n        ports:\n        - containerPort: 8080\n" for i in range(per)])
write("50-widgets.yaml", [f"apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: widget-{i}\n  namespace: {ns}\nspec:\n  size: {i}\n" for i in range(per)])
PY
}

count() { cat "$1"/manifests/*.yaml | grep -c '^kind:'; }

bench_up "$work/env"
trap 'flux_down; bench_down; rm -rf "$work"' EXIT
run_id="$(date +%s)"

generate "$work/csa" "csa-$run_id" "csa$run_id.bench.example"
generate "$work/ssa" "ssa-$run_id" "ssa$run_id.bench.example"
generate "$work/gantry" "gantry-$run_id" "gantry$run_id.bench.example"
generate "$work/flux" "flux-$run_id" "flux$run_id.bench.example"
floor_dirs=()
checked_floor_dirs=()
for level in ${FLOOR_CONCURRENCY//,/ }; do
  generate "$work/floor-$level" "floor-$level-$run_id" "floor$level-$run_id.bench.example"
  floor_dirs+=("$work/floor-$level/manifests")
  generate "$work/checked-floor-$level" "checked-floor-$level-$run_id" "checkedfloor$level-$run_id.bench.example"
  checked_floor_dirs+=("$work/checked-floor-$level/manifests")
done
objects="$(count "$work/gantry")"
echo "==> $objects objects per run"

# kubectl cannot apply a CRD and its custom resources in one call ("ensure CRDs are installed
# first"): as a user must, it applies the CRD, waits for it, then applies the directory. All of
# it is timed.
kubectl_apply() {
  local dir="$1" group="$2"
  shift 2
  kubectl apply "$@" -f "$dir/00-namespace.yaml" -f "$dir/01-crd.yaml" >/dev/null
  kubectl wait --for condition=established --timeout=60s "crd/widgets.$group" >/dev/null
  kubectl apply "$@" -f "$dir" >/dev/null
}

echo "==> kubectl apply -f DIR (client-side; the CRD first)"
start="$(now)"
kubectl_apply "$work/csa/manifests" "csa$run_id.bench.example"
csa="$(python3 -c "print($(now) - $start)")"

echo "==> kubectl apply --server-side -f DIR (the CRD first)"
start="$(now)"
kubectl_apply "$work/ssa/manifests" "ssa$run_id.bench.example" --server-side
ssa="$(python3 -c "print($(now) - $start)")"

echo "==> Gantry: push the image (not timed), create the Bundle, wait for Ready"
kubectl-bundle push "$work/gantry" "$GANTRY_REGISTRY/bench/apply:$run_id" --plain-http >/dev/null
gantry_requests="$(api_requests)"
api_requests_snapshot "$work/requests-before"
gantry_cpu="$(cpu_seconds "$GANTRY_PROVISIONER_PID")"
start="$(now)"
kubectl apply -f - >/dev/null <<BUNDLE
apiVersion: gantry.dev/v1alpha1
kind: Bundle
metadata:
  name: bench-apply-$run_id
spec:
  image: $GANTRY_REGISTRY/bench/apply:$run_id
BUNDLE
wait_ready "bench-apply-$run_id" 600
gantry="$(python3 -c "print($(now) - $start)")"
gantry_cpu="$(python3 -c "print($(cpu_seconds "$GANTRY_PROVISIONER_PID") - $gantry_cpu)")"
gantry_requests=$(( $(api_requests) - gantry_requests ))
api_requests_snapshot "$work/requests-after"
echo "  Gantry's requests by verb and resource:"
api_requests_delta "$work/requests-before" "$work/requests-after"
installed="$(kubectl get bundle "bench-apply-$run_id" -o jsonpath='{.status.inventory}' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')"
[[ "$installed" == "$objects" ]] || { echo "Gantry installed $installed objects, expected $objects" >&2; exit 1; }

echo "==> floor: apply-floor, concurrency $FLOOR_CONCURRENCY (the CRD first)"
read -r floor floor_level < <("$floor_dir/apply-floor" --concurrency "$FLOOR_CONCURRENCY" "${floor_dirs[@]}")
echo "==> floor with a dry run of every object before the first write: apply-floor --dry-run-first"
read -r checked_floor checked_floor_level < <("$floor_dir/apply-floor" --dry-run-first --concurrency "$FLOOR_CONCURRENCY" "${checked_floor_dirs[@]}")

if [[ "$FLUX" == 1 ]]; then
  echo "==> Flux: start the controllers and push the image (not timed), create the OCIRepository and Kustomization, wait for Ready"
  flux_up "$work/flux-state"
  kubectl-bundle push "$work/flux" "$GANTRY_REGISTRY/bench/apply-flux:$run_id" --plain-http >/dev/null
  flux_requests="$(api_requests)"
  flux_source_cpu="$(cpu_seconds "$FLUX_SOURCE_PID")"
  flux_kustomize_cpu="$(cpu_seconds "$FLUX_KUSTOMIZE_PID")"
  start="$(now)"
  flux_objects "bench-apply-$run_id" "$GANTRY_REGISTRY/bench/apply-flux:$run_id" | kubectl apply -f - >/dev/null
  flux_wait_ready "bench-apply-$run_id" 600
  flux="$(python3 -c "print($(now) - $start)")"
  flux_source_cpu="$(python3 -c "print($(cpu_seconds "$FLUX_SOURCE_PID") - $flux_source_cpu)")"
  flux_kustomize_cpu="$(python3 -c "print($(cpu_seconds "$FLUX_KUSTOMIZE_PID") - $flux_kustomize_cpu)")"
  flux_requests=$(( $(api_requests) - flux_requests ))
  flux_installed="$(kubectl -n "$FLUX_NAMESPACE" get kustomization "bench-apply-$run_id" -o jsonpath='{.status.inventory.entries}' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')"
  [[ "$flux_installed" == "$objects" ]] || { echo "Flux installed $flux_installed objects, expected $objects" >&2; exit 1; }
  flux_source_rss="$(peak_rss_mib "$FLUX_SOURCE_PID")"
  flux_kustomize_rss="$(peak_rss_mib "$FLUX_KUSTOMIZE_PID")"
  flux_down
fi

printf '\n%-36s %8s %9s %8s %9s %10s\n' "tool ($objects objects)" "seconds" "vs Gantry" "CPU s" "requests" "peak RSS"
printf '%-36s %8.2f %9s\n' "kubectl apply (client-side)" "$csa" "$(ratio "$csa" "$gantry")x"
printf '%-36s %8.2f %9s\n' "kubectl apply --server-side" "$ssa" "$(ratio "$ssa" "$gantry")x"
if [[ "$FLUX" == 1 ]]; then
  printf '%-36s %8.2f %9s %8.2f %9s %10s\n' "Flux (objects created -> Ready)" "$flux" "$(ratio "$flux" "$gantry")x" \
    "$(python3 -c "print($flux_source_cpu + $flux_kustomize_cpu)")" "$flux_requests" \
    "$(python3 -c "print(f'{$flux_source_rss + $flux_kustomize_rss:.1f}')") MiB"
  printf '%-36s %8s %9s %8.2f %9s %10s\n' "  source-controller" "" "" "$flux_source_cpu" "" "$flux_source_rss MiB"
  printf '%-36s %8s %9s %8.2f %9s %10s\n' "  kustomize-controller" "" "" "$flux_kustomize_cpu" "" "$flux_kustomize_rss MiB"
fi
printf '%-36s %8.2f %9s %8.2f %9s %10s\n' "Gantry (Bundle created -> Ready)" "$gantry" "1.00x" "$gantry_cpu" "$gantry_requests" \
  "$(peak_rss_mib "$GANTRY_PROVISIONER_PID") MiB"
printf '%-36s %8.2f %9s\n' "floor (apply-floor, concurrency $floor_level)" "$floor" "$(ratio "$floor" "$gantry")x"
printf '%-36s %8.2f %9s\n' "floor, dry run first (concurrency $checked_floor_level)" "$checked_floor" "$(ratio "$checked_floor" "$gantry")x"
printf '\nGantry vs client-side kubectl: %sx faster (target 5x); vs server-side kubectl: %sx (target 2x)\n' \
  "$(ratio "$csa" "$gantry")" "$(ratio "$ssa" "$gantry")"
[[ "$FLUX" == 1 ]] && printf 'Gantry vs Flux: %sx faster\n' "$(ratio "$flux" "$gantry")"
printf "Gantry's time is %sx the floor that writes without asking, %sx the floor that dry-runs every object first (target within 1.3x of it)\n" \
  "$(ratio "$gantry" "$floor")" "$(ratio "$gantry" "$checked_floor")"
printf 'load: %s\n' "$(uptime)"
