# shellcheck shell=bash
# Flux as Gantry's peer in the benchmarks: source-controller and kustomize-controller (built by
# tools/flux/build.sh) run as processes against the benchmark's API server, with their CRDs,
# and are fed the very image Gantry gets (an OCIRepository on the local registry and a
# Kustomization per bundle). Source it after bench/lib.sh, once `bench_up` has run.
# bench/helm runs source-controller and helm-controller instead (FLUX_CONTROLLERS, below): an
# OCIRepository selecting the chart's layer and a HelmRelease whose chartRef names it.
#
# Configuration, chosen so the comparison is fair:
# - Both controllers run with the flags of a stock `flux install` that matter here: their
#   default concurrency (source-controller --concurrent=2, kustomize-controller --concurrent=4,
#   --concurrent-ssa=4), leader election off, no events receiver (Events still go to the API
#   server, as Gantry's do). The API server runs with API Priority and Fairness, so Flux turns
#   its client-side rate limit off, as Gantry has none. FLUX_KUSTOMIZE_ARGS / FLUX_SOURCE_ARGS
#   add flags. helm-controller runs with its default --concurrent=4, FLUX_HELM_ARGS adds flags.
# - They act with the benchmark's admin kubeconfig, as the provisioner does.
# - The OCIRepository polls its tag every 10 s, as gantry-dev's provisioner re-resolves tags
#   (--resolve-interval=10s); plain HTTP (`insecure: true`); the first (only) layer is
#   extracted, which holds `manifests/`.
# - The Kustomization applies `./manifests` with `prune: true` and `wait: false`: Gantry's
#   Ready means every object is applied (without a health policy that waits), and so does a
#   Kustomization's Ready without `wait`. Its interval (drift correction) is 10 minutes.
#
# Only 127.0.0.1 addresses are used.

flux_dir=""
flux_state=""
FLUX_SOURCE_PID=""
FLUX_KUSTOMIZE_PID=""
FLUX_HELM_PID=""
FLUX_NAMESPACE="flux-bench"
# The controllers flux_up starts: source-controller and any of kustomize-controller and
# helm-controller (each built by tools/flux/build.sh when missing). Set it after sourcing.
FLUX_CONTROLLERS="source-controller kustomize-controller"

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# CPU seconds (user + system) a process has used so far.
cpu_seconds() {
  python3 - "$1" <<'PY'
import os, sys
with open(f"/proc/{sys.argv[1]}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
# utime and stime are fields 14 and 15 of stat(5); fields[0] is field 3 (state).
print(f"{(int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK'):.2f}")
PY
}

# Requests the API server has served so far: apiserver_request_total summed over every verb,
# resource and code (the difference between two readings is what happened in between,
# including these two reads of /metrics).
api_requests() {
  kubectl get --raw /metrics | python3 -c '
import sys
total = 0.0
for line in sys.stdin:
    if line.startswith("apiserver_request_total{"):
        total += float(line.rsplit(" ", 1)[1])
print(int(total))'
}

# Writes the API server's request counts by verb and resource to $1 (a file).
api_requests_snapshot() {
  kubectl get --raw /metrics | python3 -c '
import re, sys
counts = {}
for line in sys.stdin:
    if line.startswith("apiserver_request_total{"):
        labels = dict(re.findall(r"(\w+)=\"([^\"]*)\"", line))
        key = labels.get("verb", "") + " " + (labels.get("resource", "") or "-") + ("/" + labels["subresource"] if labels.get("subresource") else "")
        if labels.get("dry_run"):
            key += " (dry run)"
        counts[key] = counts.get(key, 0) + float(line.rsplit(" ", 1)[1])
for key, value in counts.items():
    print(f"{int(value)}\t{key}")' > "$1"
}

# Prints the requests between two snapshots ($1 before, $2 after), most first.
api_requests_delta() {
  python3 - "$1" "$2" <<'PY'
import sys
def read(path):
    counts = {}
    for line in open(path):
        value, key = line.rstrip("\n").split("\t", 1)
        counts[key] = counts.get(key, 0) + int(value)
    return counts
before, after = read(sys.argv[1]), read(sys.argv[2])
delta = sorted(((after[k] - before.get(k, 0), k) for k in after), reverse=True)
print("  " + ", ".join(f"{n} {k}" for n, k in delta if n > 0)[:600])
PY
}

# Waits until $1 (a URL) answers 200, for at most $2 seconds.
flux_wait_url() {
  local deadline=$(( $(date +%s) + $2 ))
  until curl -fsS -o /dev/null "$1" 2>/dev/null; do
    (( $(date +%s) < deadline )) || { echo "$1 did not answer within $2 s" >&2; return 1; }
    sleep 0.2
  done
}

# Starts the controllers of $FLUX_CONTROLLERS (logs and artifacts under $1) with their CRDs
# installed and established, and the namespace the Flux objects live in.
flux_up() {
  flux_state="$1"
  mkdir -p "$flux_state/storage"
  # shellcheck disable=SC2086
  flux_dir="$(bash tools/flux/build.sh $FLUX_CONTROLLERS)"
  kubectl apply --server-side -f "$flux_dir/crds" >/dev/null
  local crd
  for crd in "$flux_dir"/crds/*.yaml; do
    kubectl wait --for condition=established --timeout=60s -f "$crd" >/dev/null
  done
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$FLUX_NAMESPACE" | kubectl apply -f - >/dev/null

  local storage_port source_metrics source_health kustomize_metrics kustomize_health helm_metrics helm_health
  storage_port="$(free_port)"
  source_metrics="$(free_port)"
  source_health="$(free_port)"
  kustomize_metrics="$(free_port)"
  kustomize_health="$(free_port)"
  helm_metrics="$(free_port)"
  helm_health="$(free_port)"
  # shellcheck disable=SC2086
  "$flux_dir/source-controller" \
    --storage-path="$flux_state/storage" \
    --storage-addr="127.0.0.1:$storage_port" \
    --storage-adv-addr="127.0.0.1:$storage_port" \
    --metrics-addr="127.0.0.1:$source_metrics" \
    --health-addr="127.0.0.1:$source_health" \
    --enable-leader-election=false \
    --events-addr= \
    --log-level=info \
    ${FLUX_SOURCE_ARGS:-} >"$flux_state/source-controller.log" 2>&1 &
  FLUX_SOURCE_PID=$!
  if [[ " $FLUX_CONTROLLERS " == *" kustomize-controller "* ]]; then
    # shellcheck disable=SC2086
    "$flux_dir/kustomize-controller" \
      --metrics-addr="127.0.0.1:$kustomize_metrics" \
      --health-addr="127.0.0.1:$kustomize_health" \
      --enable-leader-election=false \
      --events-addr= \
      --log-level=info \
      ${FLUX_KUSTOMIZE_ARGS:-} >"$flux_state/kustomize-controller.log" 2>&1 &
    FLUX_KUSTOMIZE_PID=$!
  fi
  if [[ " $FLUX_CONTROLLERS " == *" helm-controller "* ]]; then
    # shellcheck disable=SC2086
    "$flux_dir/helm-controller" \
      --metrics-addr="127.0.0.1:$helm_metrics" \
      --health-addr="127.0.0.1:$helm_health" \
      --enable-leader-election=false \
      --events-addr= \
      --log-level=info \
      ${FLUX_HELM_ARGS:-} >"$flux_state/helm-controller.log" 2>&1 &
    FLUX_HELM_PID=$!
  fi
  # Stopped with the benchmark, whatever else its EXIT trap does.
  local previous
  previous="$(trap -p EXIT)"
  previous="${previous#trap -- \'}"
  previous="${previous%\' EXIT}"
  previous="${previous//\'\\\'\'/\'}"
  # shellcheck disable=SC2064
  trap "flux_down; $previous" EXIT
  flux_wait_url "http://127.0.0.1:$source_health/readyz" 60 \
    || { tail -20 "$flux_state/source-controller.log" >&2; return 1; }
  if [[ -n "$FLUX_KUSTOMIZE_PID" ]]; then
    flux_wait_url "http://127.0.0.1:$kustomize_health/readyz" 60 \
      || { tail -20 "$flux_state/kustomize-controller.log" >&2; return 1; }
  fi
  if [[ -n "$FLUX_HELM_PID" ]]; then
    flux_wait_url "http://127.0.0.1:$helm_health/readyz" 60 \
      || { tail -20 "$flux_state/helm-controller.log" >&2; return 1; }
  fi
}

# Stops the controllers.
flux_down() {
  local pid
  for pid in $FLUX_SOURCE_PID $FLUX_KUSTOMIZE_PID $FLUX_HELM_PID; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in $FLUX_SOURCE_PID $FLUX_KUSTOMIZE_PID $FLUX_HELM_PID; do
    wait "$pid" 2>/dev/null || true
  done
  FLUX_SOURCE_PID=""
  FLUX_KUSTOMIZE_PID=""
  FLUX_HELM_PID=""
}

# Prints (does not create) an OCIRepository and a Kustomization named $1 for image $2
# (registry/repository:tag on the local registry), applying into namespace $3 when given (as a
# Bundle's installNamespace does for objects without one).
flux_objects() {
  local name="$1" image="$2" target="${3:-}"
  local repository="${image%:*}" tag="${image##*:}"
  cat <<OBJECTS
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata:
  name: $name
  namespace: $FLUX_NAMESPACE
spec:
  url: oci://$repository
  ref:
    tag: "$tag"
  insecure: true
  interval: 10s
  layerSelector:
    mediaType: application/vnd.oci.image.layer.v1.tar+gzip
    operation: extract
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: $name
  namespace: $FLUX_NAMESPACE
spec:
  sourceRef:
    kind: OCIRepository
    name: $name
  path: ./manifests
  prune: true
  wait: false
  interval: 10m
OBJECTS
  if [[ -n "$target" ]]; then
    printf '  targetNamespace: %s\n' "$target"
  fi
  printf -- '---\n'
}

# Prints (does not create) an OCIRepository and a HelmRelease named $1 for the Helm chart $2
# (registry/repository:tag on the local registry, as `helm push` printed it), released as $3
# into namespace $4 with the values $5 (a JSON mapping). Flux's way for a chart in an OCI
# registry: the OCIRepository copies the chart's layer (its media type) as the artifact, and the
# HelmRelease's chartRef names it. `disableWait: true` on install and upgrade: Ready once
# every object is applied, as Gantry's Ready without a health policy that waits (bench/helm
# says why).
flux_helm_objects() {
  local name="$1" chart="$2" release="$3" target="$4" values="$5"
  local repository="${chart%:*}" tag="${chart##*:}"
  cat <<OBJECTS
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata:
  name: $name
  namespace: $FLUX_NAMESPACE
spec:
  url: oci://$repository
  ref:
    tag: "$tag"
  insecure: true
  interval: 10s
  layerSelector:
    mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip
    operation: copy
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: $name
  namespace: $FLUX_NAMESPACE
spec:
  releaseName: $release
  targetNamespace: $target
  storageNamespace: $target
  chartRef:
    kind: OCIRepository
    name: $name
  interval: 10m
  install:
    disableWait: true
    disableWaitForJobs: true
  upgrade:
    disableWait: true
    disableWaitForJobs: true
  values: $values
---
OBJECTS
}

# Waits until HelmRelease $1 is Ready, for at most $2 seconds.
flux_wait_helmrelease_ready() {
  kubectl -n "$FLUX_NAMESPACE" wait --for=condition=Ready "helmrelease/$1" --timeout="${2:-600}s" >/dev/null \
    || { kubectl -n "$FLUX_NAMESPACE" get ocirepositories,helmreleases -o wide >&2; return 1; }
}

# Waits until Kustomization $1 is Ready, for at most $2 seconds.
flux_wait_ready() {
  kubectl -n "$FLUX_NAMESPACE" wait --for=condition=Ready "kustomization/$1" --timeout="${2:-600}s" >/dev/null \
    || { kubectl -n "$FLUX_NAMESPACE" get ocirepositories,kustomizations -o wide >&2; return 1; }
}

# Waits until $1 Kustomizations are Ready, for at most $2 seconds.
flux_wait_all_ready() {
  wait_ready_count kustomizations "$1" "${2:-600}" -n "$FLUX_NAMESPACE" || {
    echo "only $(kubectl -n "$FLUX_NAMESPACE" get kustomizations -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$') of $1 Kustomizations Ready after ${2:-600} s" >&2
    return 1
  }
}

# The scale benchmark's Flux column: $3 bundles of image $2 as OCIRepository + Kustomization
# pairs, each applying into a namespace of its own (as each Bundle has its installNamespace);
# prints the time until all are Ready, the requests the API server served meanwhile, and each
# controller's CPU seconds in that time and peak RSS. $1 is a scratch directory, $4 a run id.
flux_scale() {
  local work="$1" image="$2" count="$3" run_id="$4" i
  flux_up "$work/flux-state"
  # Created as Gantry's are (create_fast, bench/lib.sh), not by kubectl one after another.
  mkdir -p "$work/flux-namespaces" "$work/flux-objects"
  for i in $(seq 1 "$count"); do
    printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: flux-scale-%s-%s\n---\n' "$run_id" "$i"
  done > "$work/flux-namespaces/namespaces.yaml"
  create_fast "$work/flux-namespaces"
  for i in $(seq 1 "$count"); do
    flux_objects "scale-$run_id-$i" "$image" "flux-scale-$run_id-$i"
  done > "$work/flux-objects/objects.yaml"
  echo "==> Flux: creating $count OCIRepository + Kustomization pairs"
  local requests source_cpu kustomize_cpu start all_ready
  requests="$(api_requests)"
  source_cpu="$(cpu_seconds "$FLUX_SOURCE_PID")"
  kustomize_cpu="$(cpu_seconds "$FLUX_KUSTOMIZE_PID")"
  start="$(now)"
  create_fast "$work/flux-objects"
  flux_wait_all_ready "$count" 600
  all_ready="$(python3 -c "print($(now) - $start)")"
  source_cpu="$(python3 -c "print($(cpu_seconds "$FLUX_SOURCE_PID") - $source_cpu)")"
  kustomize_cpu="$(python3 -c "print($(cpu_seconds "$FLUX_KUSTOMIZE_PID") - $kustomize_cpu)")"
  requests=$(( $(api_requests) - requests ))
  printf '%-44s %.1f s\n' "Flux: time to all Ready" "$all_ready"
  printf '%-44s %s\n' "Flux: API requests while installing" "$requests"
  printf '%-44s %.2f s / %.2f s\n' "Flux: CPU (source- / kustomize-controller)" "$source_cpu" "$kustomize_cpu"
  printf '%-44s %s MiB / %s MiB\n' "Flux: peak RSS (source- / kustomize-ctrl)" \
    "$(peak_rss_mib "$FLUX_SOURCE_PID")" "$(peak_rss_mib "$FLUX_KUSTOMIZE_PID")"
  flux_down
}
