#!/usr/bin/env bash
# Helm charts: the same charts from creating the object to Ready through Gantry (a Bundle of a
# class of `gantry.dev/helm`, rendered by gantry-helm-plugin), through `helm install`, and
# through Flux's helm-controller (an OCIRepository + a HelmRelease, with source-controller
# serving the chart), on the same API server in the same run. Two charts, each pushed by the
# real `helm push` to the benchmark's registry:
#
#   metrics-server   the real chart, metrics-server 3.13.1 (charts/metrics-server of the Go
#                    module sigs.k8s.io/metrics-server v0.9.0, as the tests take it)
#   bench-objects    a generated chart of about $OBJECTS objects: ConfigMaps, Secrets, Services
#                    and Deployments, each kind a `range until .Values.count` loop
#
# For each chart and each tool: the time, CPU seconds (utime + stime from /proc/PID/stat) and
# peak RSS (VmHWM, reset at the start of each measurement) of the processes doing the work
# (gantry-provisioner and gantry-helm-plugin; helm; helm-controller and source-controller),
# and the requests the API server served meanwhile (apiserver_request_total before/after). Each
# measurement starts once the API server is quiet, and Gantry's Bundles are deleted before the
# others are measured (below).
#
# What "Ready" means, the same for the three: every object of the chart applied. No
# controller-manager runs here, so a Deployment never becomes available, and a tool that waits
# for its objects' health never finishes. So `helm install` runs without --wait, the HelmRelease
# has `install.disableWait: true`, and Gantry's class has no health policy that waits (the
# default). All three install with the same values; the metrics-server chart's APIService is
# left out (`apiService.create: false`): it is one cluster-wide object of a fixed name that the
# three releases would fight over, and its backend never runs here; and its nameOverride is
# the release's name, as the chart names a ClusterRole after it. Each tool gets its own
# namespace (bench-gantry, bench-helm, bench-flux) and release names (<tool>-<chart>).
#
#   bash bench/helm/run.sh            # OBJECTS=500 FLUX=1
#   FLUX=0 bash bench/helm/run.sh     # without helm-controller (nothing of Flux built)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck disable=SC1091
source bench/lib.sh
# shellcheck disable=SC1091
source bench/flux/lib.sh
FLUX_CONTROLLERS="source-controller helm-controller"

OBJECTS="${OBJECTS:-500}"
FLUX="${FLUX:-1}"
METRICS_SERVER_MODULE="sigs.k8s.io/metrics-server@v0.9.0"
work="$(mktemp -d)"
PLUGIN_PID=""

plugin_down() {
  if [[ -n "$PLUGIN_PID" ]]; then
    kill "$PLUGIN_PID" 2>/dev/null || true
    wait "$PLUGIN_PID" 2>/dev/null || true
    PLUGIN_PID=""
  fi
}
cleanup() {
  if [[ -n "${BENCH_LOGS:-}" ]]; then
    mkdir -p "$BENCH_LOGS"
    cp "$work"/plugin/*.log "$work"/flux-state/*.log "$BENCH_LOGS/" 2>/dev/null || true
  fi
  flux_down
  plugin_down
  bench_down
  rm -rf "$work"
}
trap cleanup EXIT

# Built before anything is timed (the first time takes minutes).
HELM="$(bash tools/helm/build.sh)/helm"
PLUGIN="$(bash plugins/helm/build.sh)/gantry-helm-plugin"
# shellcheck disable=SC2086
[[ "$FLUX" == 1 ]] && bash tools/flux/build.sh $FLUX_CONTROLLERS >/dev/null
metrics_chart="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$METRICS_SERVER_MODULE" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')/charts/metrics-server"
[[ -f "$metrics_chart/Chart.yaml" ]] || { echo "no chart at $metrics_chart" >&2; exit 1; }

export HELM_CACHE_HOME="$work/helm-home/cache" HELM_CONFIG_HOME="$work/helm-home/config" \
  HELM_DATA_HOME="$work/helm-home/data"

# The generated chart: $1 objects of each of four kinds (count), in DIR $2.
generate_chart() {
  local dir="$2/bench-objects"
  mkdir -p "$dir/templates"
  printf 'apiVersion: v2\nname: bench-objects\nversion: 0.1.0\ndescription: %s objects of four kinds\n' \
    "$(($1 * 4))" > "$dir/Chart.yaml"
  printf 'count: %s\n' "$1" > "$dir/values.yaml"
  cat > "$dir/templates/objects.yaml" <<'TEMPLATE'
{{- range $i := until (int .Values.count) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $.Release.Name }}-config-{{ $i }}
  labels:
    app.kubernetes.io/instance: {{ $.Release.Name }}
data:
  key: value-{{ $i }}
  other: {{ mul $i 7 | quote }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ $.Release.Name }}-secret-{{ $i }}
  labels:
    app.kubernetes.io/instance: {{ $.Release.Name }}
stringData:
  password: pass-{{ $i }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $.Release.Name }}-svc-{{ $i }}
  labels:
    app.kubernetes.io/instance: {{ $.Release.Name }}
spec:
  selector:
    app: {{ $.Release.Name }}-app-{{ $i }}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $.Release.Name }}-app-{{ $i }}
  labels:
    app.kubernetes.io/instance: {{ $.Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {{ $.Release.Name }}-app-{{ $i }}
  template:
    metadata:
      labels:
        app: {{ $.Release.Name }}-app-{{ $i }}
    spec:
      containers:
      - name: app
        image: registry.example/app:{{ $i }}
        ports:
        - containerPort: 8080
{{- end }}
TEMPLATE
}

# Packages chart directory $1 and pushes it with `helm push` to the registry; prints the
# reference helm printed (registry/charts/name:version).
push_chart() {
  local out said
  out="$work/packages/$(basename "$1")"
  mkdir -p "$out"
  "$HELM" package "$1" -d "$out" >/dev/null
  said="$("$HELM" push "$out"/*.tgz "oci://$GANTRY_REGISTRY/charts" --plain-http 2>&1)" \
    || { echo "helm push: $said" >&2; return 1; }
  sed -n 's/^Pushed: //p' <<<"$said" | tr -d '[:space:]'
}

# Resets the peak RSS (VmHWM) of each process to its RSS now, so that a measurement's peak is
# its own (clear_refs 5, see proc(5)). Prints nothing; a kernel that refuses leaves the peak
# since the process started, which is said once.
hwm_reset_warned=""
reset_peak() {
  local pid
  for pid in "$@"; do
    if ! { echo 5 > "/proc/$pid/clear_refs"; } 2>/dev/null && [[ -z "$hwm_reset_warned" ]]; then
      echo "  (the peak RSS cannot be reset here: each peak is since its process started)" >&2
      hwm_reset_warned=1
    fi
  done
}

sub() { python3 -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]):.2f}')" "$1" "$2"; }
add() { python3 -c "import sys; print(f'{sum(map(float, sys.argv[1:])):.2f}')" "$@"; }
add_mib() { python3 -c "import sys; print(f'{sum(map(float, sys.argv[1:])):.1f}')" "$@"; }

# Waits (at most 60 s) until the API server is quiet: fewer than 20 requests in 2 s (leases,
# these reads of /metrics), so that what one tool leaves running does not count in the next
# one's window.
settle() {
  local before after deadline=$(( $(date +%s) + 60 ))
  while (( $(date +%s) < deadline )); do
    before="$(api_requests)"
    sleep 2
    after="$(api_requests)"
    (( after - before < 20 )) && return 0
  done
  echo "  (the API server was still busy after 60 s: $((after - before)) requests in 2 s)" >&2
}

# The number of objects of release $1 in namespace $2, as Helm recorded it.
release_objects() { "$HELM" get manifest "$1" -n "$2" | grep -c '^kind:'; }

# Results, by "tool chart": seconds, CPU seconds, peak RSS (MiB), requests, objects; and by
# "tool chart process" the CPU seconds and peak RSS of each process.
declare -A secs cpu rss requests objects pcpu prss

# --- The environment, the plugin, the class ---------------------------------------------------
bench_up "$work/env" "--plugin-token-file=$work/plugin-token"
trap cleanup EXIT
for ns in bench-gantry bench-helm bench-flux; do
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$ns" | kubectl apply -f - >/dev/null
done

echo "==> gantry-helm-plugin as a process on 127.0.0.1, registered for gantry.dev/helm"
plugin_up() {
  local dir="$work/plugin" port
  mkdir -p "$dir"
  # A CA of its own and a serving certificate for localhost (the ExternalName Service's name)
  # and 127.0.0.1, as tests/src/helm_plugin.rs does.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=gantry-helm-plugin-ca -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj /CN=localhost -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
  openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 1 \
    -out "$dir/tls.crt" -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n') 2>/dev/null
  port="$(free_port)"
  "$PLUGIN" --listen="127.0.0.1:$port" --tls-cert-file="$dir/tls.crt" --tls-key-file="$dir/tls.key" \
    --kubeconfig="$KUBECONFIG" --audience=gantry.dev/provisioner-plugin \
    --allowed-user=system:serviceaccount:gantry-system:gantry-provisioner \
    >"$dir/gantry-helm-plugin.log" 2>&1 &
  PLUGIN_PID=$!
  python3 - "$port" <<'PY' || { tail -20 "$dir/gantry-helm-plugin.log" >&2; return 1; }
import socket, sys, time
deadline = time.time() + 60
while time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PY
  # The provisioner's token for plugins (the audience the plugin checks), where its
  # --plugin-token-file reads it on every call.
  kubectl -n gantry-system create token gantry-provisioner --audience=gantry.dev/provisioner-plugin \
    --duration=4h > "$work/plugin-token"
  kubectl -n gantry-system create secret generic gantry-helm-plugin-ca --from-file=ca.crt="$dir/ca.crt" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -f - >/dev/null <<OBJECTS
apiVersion: v1
kind: Service
metadata:
  name: gantry-helm-plugin
  namespace: gantry-system
  labels:
    gantry.dev/provisioner-plugin: "true"
  annotations:
    gantry.dev/provisioner: gantry.dev/helm
    gantry.dev/provisioner-ca: gantry-helm-plugin-ca
spec:
  type: ExternalName
  externalName: localhost
  ports:
  - name: https
    port: $port
---
apiVersion: gantry.dev/v1alpha1
kind: ProvisionerClass
metadata:
  name: helm
spec:
  provisioner: gantry.dev/helm
  approval: Automatic
  serviceAccount:
    namespace: gantry-system
    name: gantry-applier
  insecureRegistries: ["$GANTRY_REGISTRY"]
OBJECTS
  kubectl wait --for=condition=Accepted provisionerclass/helm --timeout=120s >/dev/null || {
    kubectl get provisionerclass helm -o jsonpath='{.status.conditions}' >&2
    echo >&2
    tail -20 "$dir/gantry-helm-plugin.log" >&2
    return 1
  }
}
plugin_up

echo "==> charts: packaged and pushed by helm push (not timed)"
generate_chart "$(( (OBJECTS + 3) / 4 ))" "$work/charts"
metrics_ref="$(push_chart "$metrics_chart")"
objects_ref="$(push_chart "$work/charts/bench-objects")"
charts=(metrics-server bench-objects)
declare -A ref
ref[metrics-server]="$metrics_ref"
ref[bench-objects]="$objects_ref"
# values_of TOOL CHART: the values (JSON) of TOOL's release of CHART. The same for the three but
# for metrics-server's nameOverride, the release's name: the chart names a ClusterRole after it
# (system:<name>-aggregated-reader), which the three releases would otherwise share.
values_of() {
  case "$2" in
    metrics-server) printf '{"apiService": {"create": false}, "nameOverride": "%s-metrics-server"}' "$1" ;;
    bench-objects) printf '{"count": %s}' "$(( (OBJECTS + 3) / 4 ))" ;;
  esac
}
echo "  ${ref[metrics-server]}, ${ref[bench-objects]}"

# --- Gantry -----------------------------------------------------------------------------------
for chart in "${charts[@]}"; do
  name="gantry-$chart"
  echo "==> Gantry: $chart: create the Bundle, wait for Ready"
  settle
  reset_peak "$GANTRY_PROVISIONER_PID" "$PLUGIN_PID"
  before_requests="$(api_requests)"
  api_requests_snapshot "$work/requests-before"
  before_provisioner="$(cpu_seconds "$GANTRY_PROVISIONER_PID")"
  before_plugin="$(cpu_seconds "$PLUGIN_PID")"
  start="$(now)"
  kubectl apply -f - >/dev/null <<BUNDLE
apiVersion: gantry.dev/v1alpha1
kind: Bundle
metadata:
  name: $name
spec:
  provisionerClassName: helm
  image: ${ref[$chart]}
  installNamespace: bench-gantry
  config: $(values_of gantry "$chart")
BUNDLE
  wait_ready "$name" 600 || { kubectl get bundle "$name" -o jsonpath='{.status.conditions}' >&2; exit 1; }
  secs["gantry $chart"]="$(sub "$(now)" "$start")"
  pcpu["gantry $chart provisioner"]="$(sub "$(cpu_seconds "$GANTRY_PROVISIONER_PID")" "$before_provisioner")"
  pcpu["gantry $chart plugin"]="$(sub "$(cpu_seconds "$PLUGIN_PID")" "$before_plugin")"
  requests["gantry $chart"]=$(( $(api_requests) - before_requests ))
  api_requests_snapshot "$work/requests-after"
  prss["gantry $chart provisioner"]="$(peak_rss_mib "$GANTRY_PROVISIONER_PID")"
  prss["gantry $chart plugin"]="$(peak_rss_mib "$PLUGIN_PID")"
  cpu["gantry $chart"]="$(add "${pcpu["gantry $chart provisioner"]}" "${pcpu["gantry $chart plugin"]}")"
  rss["gantry $chart"]="$(add_mib "${prss["gantry $chart provisioner"]}" "${prss["gantry $chart plugin"]}")"
  objects["gantry $chart"]="$(kubectl get bundle "$name" -o jsonpath='{.status.inventory}' |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')"
  echo "  Gantry's requests by verb and resource:"
  api_requests_delta "$work/requests-before" "$work/requests-after"
done

# Gantry's bundles go before the others are measured: while their Deployments are not available
# (never, here), the pass at the end of their health timeout (5 minutes after the install) reads
# their Services and Deployments again, once, requests that would otherwise count in the others'
# windows.
echo "==> Gantry: delete its Bundles and wait until they are gone (not timed)"
kubectl delete bundle "${charts[@]/#/gantry-}" --wait=false >/dev/null
for chart in "${charts[@]}"; do
  kubectl wait --for=delete "bundle/gantry-$chart" --timeout=300s >/dev/null ||
    echo "  (bundle gantry-$chart not gone after 300 s)" >&2
done

# --- helm install -----------------------------------------------------------------------------
# helm runs as a child of python, which reports its wall time, CPU seconds and peak RSS
# (wait4's rusage).
timed_helm() {
  python3 - "$@" <<'PY'
import os, subprocess, sys, time
start = time.monotonic()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
elapsed = time.monotonic() - start
if os.waitstatus_to_exitcode(status) != 0:
    sys.stderr.write(err.decode(errors="replace"))
    sys.exit(1)
print(f"{elapsed:.3f} {usage.ru_utime + usage.ru_stime:.2f} {usage.ru_maxrss / 1024:.1f}")
PY
}
for chart in "${charts[@]}"; do
  name="helm-$chart"
  echo "==> helm install: $chart (without --wait), from the registry"
  values_of helm "$chart" > "$work/values-$chart.json"
  settle
  repository="${ref[$chart]%:*}"
  before_requests="$(api_requests)"
  api_requests_snapshot "$work/requests-before"
  measured="$(timed_helm "$HELM" install "$name" "oci://$repository" \
    --version "${ref[$chart]##*:}" --plain-http -n bench-helm -f "$work/values-$chart.json")"
  read -r seconds helm_cpu helm_rss <<<"$measured"
  requests["helm $chart"]=$(( $(api_requests) - before_requests ))
  api_requests_snapshot "$work/requests-after"
  echo "  helm's requests by verb and resource:"
  api_requests_delta "$work/requests-before" "$work/requests-after"
  secs["helm $chart"]="$seconds"
  cpu["helm $chart"]="$helm_cpu"
  rss["helm $chart"]="$helm_rss"
  objects["helm $chart"]="$(release_objects "$name" bench-helm)"
done

# --- Flux's helm-controller -------------------------------------------------------------------
if [[ "$FLUX" == 1 ]]; then
  echo "==> Flux: start source-controller and helm-controller (not timed)"
  flux_up "$work/flux-state"
  for chart in "${charts[@]}"; do
    name="flux-$chart"
    echo "==> Flux: $chart: create the OCIRepository and the HelmRelease, wait for Ready"
    settle
    reset_peak "$FLUX_SOURCE_PID" "$FLUX_HELM_PID"
    before_requests="$(api_requests)"
    api_requests_snapshot "$work/requests-before"
    before_source="$(cpu_seconds "$FLUX_SOURCE_PID")"
    before_helm="$(cpu_seconds "$FLUX_HELM_PID")"
    start="$(now)"
    flux_helm_objects "$name" "${ref[$chart]}" "$name" bench-flux "$(values_of flux "$chart")" | kubectl apply -f - >/dev/null
    flux_wait_helmrelease_ready "$name" 600 || { tail -20 "$work/flux-state/helm-controller.log" >&2; exit 1; }
    secs["flux $chart"]="$(sub "$(now)" "$start")"
    pcpu["flux $chart source"]="$(sub "$(cpu_seconds "$FLUX_SOURCE_PID")" "$before_source")"
    pcpu["flux $chart helm"]="$(sub "$(cpu_seconds "$FLUX_HELM_PID")" "$before_helm")"
    requests["flux $chart"]=$(( $(api_requests) - before_requests ))
    api_requests_snapshot "$work/requests-after"
    echo "  Flux's requests by verb and resource:"
    api_requests_delta "$work/requests-before" "$work/requests-after"
    prss["flux $chart source"]="$(peak_rss_mib "$FLUX_SOURCE_PID")"
    prss["flux $chart helm"]="$(peak_rss_mib "$FLUX_HELM_PID")"
    cpu["flux $chart"]="$(add "${pcpu["flux $chart source"]}" "${pcpu["flux $chart helm"]}")"
    rss["flux $chart"]="$(add_mib "${prss["flux $chart source"]}" "${prss["flux $chart helm"]}")"
    objects["flux $chart"]="$(release_objects "$name" bench-flux)"
  done
  flux_down
fi

# --- The table --------------------------------------------------------------------------------
tools=(gantry helm)
[[ "$FLUX" == 1 ]] && tools+=(flux)
for chart in "${charts[@]}"; do
  for tool in "${tools[@]}"; do
    [[ "${objects["$tool $chart"]}" == "${objects["gantry $chart"]}" ]] || {
      echo "$tool installed ${objects["$tool $chart"]} objects of $chart, Gantry ${objects["gantry $chart"]}" >&2
      exit 1
    }
  done
done

row() { printf '%-40s %8s %9s %8s %9s %10s\n' "$@"; }
for chart in "${charts[@]}"; do
  g="gantry $chart"
  printf '\n'
  row "$chart (${objects[$g]} objects)" seconds "vs Gantry" "CPU s" requests "peak RSS"
  row "helm install (no --wait)" "${secs["helm $chart"]}" "$(ratio "${secs["helm $chart"]}" "${secs[$g]}")x" \
    "${cpu["helm $chart"]}" "${requests["helm $chart"]}" "${rss["helm $chart"]} MiB"
  if [[ "$FLUX" == 1 ]]; then
    f="flux $chart"
    row "Flux (HelmRelease created -> Ready)" "${secs[$f]}" "$(ratio "${secs[$f]}" "${secs[$g]}")x" \
      "${cpu[$f]}" "${requests[$f]}" "${rss[$f]} MiB"
    row "  helm-controller" "" "" "${pcpu["$f helm"]}" "" "${prss["$f helm"]} MiB"
    row "  source-controller" "" "" "${pcpu["$f source"]}" "" "${prss["$f source"]} MiB"
  fi
  row "Gantry (Bundle created -> Ready)" "${secs[$g]}" "1.00x" "${cpu[$g]}" "${requests[$g]}" "${rss[$g]} MiB"
  row "  gantry-provisioner" "" "" "${pcpu["$g provisioner"]}" "" "${prss["$g provisioner"]} MiB"
  row "  gantry-helm-plugin" "" "" "${pcpu["$g plugin"]}" "" "${prss["$g plugin"]} MiB"
done

printf '\nGoal: Gantry at most half of helm-controller'"'"'s time and a third of its memory\n'
for chart in "${charts[@]}"; do
  g="gantry $chart"
  if [[ "$FLUX" == 1 ]]; then
    f="flux $chart"
    printf '  %s: time %ss vs %ss, %s of helm-controller'"'"'s (goal at most 0.50); peak RSS of provisioner + plugin %s MiB vs helm-controller alone %s MiB, %s (goal at most 0.33); vs helm-controller + source-controller %s\n' \
      "$chart" "${secs[$g]}" "${secs[$f]}" "$(ratio "${secs[$g]}" "${secs[$f]}")" "${rss[$g]}" "${prss["$f helm"]}" \
      "$(ratio "${rss[$g]}" "${prss["$f helm"]}")" "$(ratio "${rss[$g]}" "${rss[$f]}")"
  else
    printf '  %s: not measured (FLUX=0)\n' "$chart"
  fi
  printf '  %s: helm install took %sx Gantry'"'"'s time\n' "$chart" "$(ratio "${secs["helm $chart"]}" "${secs[$g]}")"
done
printf 'load: %s\n' "$(uptime)"
