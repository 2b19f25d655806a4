#!/usr/bin/env bash
# Scale: BUNDLES bundles of OBJECTS ConfigMaps each, every bundle in its own namespace.
# Measures the time until all are Ready, the provisioner's peak RSS, and during
# STEADY_SECONDS of steady state afterwards: the provisioner's CPU (utime+stime from
# /proc/PID/stat, as % of one core), the write requests the API server receives (Lease
# renewals of leader election excluded; there should be none else), and the requests the
# registry serves (tags resolved again every --resolve-interval, 5m as in production).
#
#   bash bench/scale/run.sh [BUNDLES] [OBJECTS]     # 200 bundles x 20 objects by default
#   STEADY_SECONDS=60 bash bench/scale/run.sh 2000   # a shorter steady window (default 300)
#   PROVISIONER_ARGS="--reconcile-concurrency=16" bash bench/scale/run.sh 1000
#   REPLICAS=3 bash bench/scale/run.sh 2000          # 3 replicas with --sharding (default 1)
#
# With REPLICAS > 1, after the steady state (FAILOVER=0 skips this): one shard that is not the
# sharder is killed with SIGKILL; printed are, for each of its bundles, the time until the slot
# table gave its slot to another shard and until that shard's list of the bundles of its slots
# completed (min/p50/p99/max, from the audit log), the requests meanwhile (ConfigMap writes
# would be a bundle applied again) and that all are Ready again. Then a new replica starts:
# printed are how many bundles moved (about 1/N is the ring's promise) and when the last write
# of the slot table was.
#
# FLOOR=1 (default) first measures what the API server accepts on its own, two floors: apply-floor
# server-side-applies the same BUNDLES x OBJECTS ConfigMaps into BUNDLES other namespaces
# (created beforehand, as for Gantry), FLOOR_CONCURRENCY at once, nothing else; then, into BUNDLES
# more namespaces, the same plus what any provisioner writes per bundle: the Bundle's creation
# (one as the benchmark's, naming a class of another provisioner, so Gantry leaves it alone)
# before its objects, and after them one status write of the size Gantry's at Ready has (a merge
# patch through the status subresource), FLOOR_CONCURRENCY requests at once. The floor's Bundles
# are deleted before Gantry's are created.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck disable=SC1091
source bench/lib.sh
# shellcheck disable=SC1091
source bench/flux/lib.sh

BUNDLES="${1:-${BUNDLES:-200}}"
OBJECTS="${2:-${OBJECTS:-20}}"
STEADY_SECONDS="${STEADY_SECONDS:-${STEADY:-300}}"
READY_DEADLINE="${READY_DEADLINE:-900}"
REPLICAS="${REPLICAS:-1}"
read -r -a provisioner_args <<< "--resolve-interval=5m ${PROVISIONER_ARGS:-}"
shard_args=()
((REPLICAS > 1)) && shard_args=(--sharding)
work="$(mktemp -d)"
extra_pids=()
stop_replicas() {
  ((${#extra_pids[@]})) && kill "${extra_pids[@]}" 2>/dev/null
  wait "${extra_pids[@]}" 2>/dev/null || true
}
trap 'bench_down; rm -rf "$work"' EXIT

if ((REPLICAS > 1)); then
  bench_up "$work/env" "${provisioner_args[@]}" "${shard_args[@]}" --identity shard-0
else
  bench_up "$work/env" "${provisioner_args[@]}"
fi
trap 'stop_replicas; bench_down; rm -rf "$work"' EXIT
run_id="$(date +%s)"
pid="$GANTRY_PROVISIONER_PID"
pids=("$pid")
# More replicas, each a shard: the same flags, an identity of its own.
for ((i = 1; i < REPLICAS; i++)); do
  mkdir -p "$work/shard-$i"
  "$bench_bin/gantry-provisioner" --kubeconfig "$KUBECONFIG" --storage-url "$GANTRY_STORAGE_URL" \
    --namespace gantry-system --metrics-address 127.0.0.1:0 --scratch-dir "$work/shard-$i" \
    "${provisioner_args[@]}" "${shard_args[@]}" --identity "shard-$i" >"$work/shard-$i/log" 2>&1 &
  extra_pids+=($!)
  pids+=($!)
done
if ((REPLICAS > 1)); then
  for _ in $(seq 1 120); do
    live="$(kubectl -n gantry-system get lease -l gantry.dev/shard --no-headers 2>/dev/null | wc -l)"
    ((live == REPLICAS)) && break
    sleep 0.5
  done
  ((live == REPLICAS)) || { echo "only $live of $REPLICAS shards announced themselves" >&2; exit 1; }
fi
# The largest peak RSS of the replicas, and their CPU seconds together.
peak_rss_replicas() { for p in "${pids[@]}"; do peak_rss_mib "$p"; echo; done | sort -g | tail -1; }
cpu_replicas() { python3 -c "import sys; print(sum(float(a) for a in sys.argv[1:]))" $(for p in "${pids[@]}"; do cpu_seconds "$p"; done); }

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

# Namespaces and Bundles are created by create_fast (bench/lib.sh): kubectl, one object after
# another, took a minute for 2,000 and would be measured instead of the provisioner.
mkdir -p "$work/namespaces" "$work/bundles"
for i in $(seq 1 "$BUNDLES"); do
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scale-%s-%s\n---\n' "$run_id" "$i"
done > "$work/namespaces/namespaces.yaml"
for i in $(seq 1 "$BUNDLES"); do
  printf 'apiVersion: gantry.dev/v1alpha1\nkind: Bundle\nmetadata:\n  name: scale-%s-%s\nspec:\n  image: %s/bench/scale:%s\n  installNamespace: scale-%s-%s\n---\n' \
    "$run_id" "$i" "$GANTRY_REGISTRY" "$run_id" "$run_id" "$i"
done > "$work/bundles/bundles.yaml"
create_fast "$work/namespaces"

floor="" floor_bundles=""
if [[ "${FLOOR:-1}" == 1 ]]; then
  # The second floor's Bundles name a class of another provisioner: Gantry's provisioner, running
  # meanwhile, sees them and writes nothing to them (created first so that its watch has it).
  printf 'apiVersion: gantry.dev/v1alpha1\nkind: ProvisionerClass\nmetadata:\n  name: floor\nspec:\n  provisioner: bench.gantry.dev/floor\n' |
    kubectl apply --server-side -f - >/dev/null
  mkdir -p "$work/floor-ns" "$work/floor" "$work/floor-bundles"
  python3 - "$work" "$BUNDLES" "$OBJECTS" "$run_id" "$GANTRY_REGISTRY" "$GANTRY_STORAGE_URL" <<'PY'
import datetime, hashlib, json, sys
work, bundles, objects, run_id, registry, storage = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]

def configmap(j, ns):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"config-{j}", "namespace": ns}, "data": {"key": f"value-{j}"}}

def digest(text):
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

# The status Gantry writes at Ready for a bundle of the benchmark's image: the same fields,
# inventory and message lengths (read from a Bundle after an install).
at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
manifest, content = digest(f"manifest-{run_id}"), digest(f"content-{run_id}")
image = f"{registry}/bench/scale@{manifest}"
def condition(type_, reason, message):
    return {"type": type_, "status": "True", "reason": reason, "message": message, "observedGeneration": 1, "lastTransitionTime": at}
def status(name, ns):
    installed = f"{objects} objects of {image} installed"
    return {
        "observedGeneration": 1, "phase": "Installed", "message": f"{objects} objects of scale@{manifest[:19]} installed",
        "className": "floor", "resolvedImage": image, "installedImage": image, "manifestDigest": manifest,
        "platform": "linux/amd64", "contentURL": f"{storage}/bundles/{name}/{content[7:]}.tar.gz",
        "contentDigest": content, "installedContentDigest": content, "installedSpec": {"installNamespace": ns},
        "requestedPermissions": {"clusterScoped": [], "namespaced": [{"namespace": ns, "kinds": [{"group": "", "kind": "ConfigMap", "count": objects}]}],
                                 "serviceAccount": {"namespace": "gantry-system", "name": "gantry-applier"}},
        "inventory": [{"group": "", "version": "v1", "kind": "ConfigMap", "namespace": ns, "name": f"config-{j}"} for j in range(objects)],
        "objectHealth": {"healthy": objects, "progressing": 0, "failed": 0},
        "history": [{"image": image, "digest": manifest, "approval": "Automatic", "installedAt": at}],
        "conditions": [condition("Unpacked", "UnpackSucceeded", f"{objects} objects from {image}"),
                       condition("Approved", "AutomaticApproval", "ProvisionerClass floor approves every digest"),
                       condition("Installed", "InstallSucceeded", installed),
                       condition("Healthy", "Healthy", f"{objects} objects healthy"),
                       condition("Ready", "InstallSucceeded", installed)],
    }

with open(f"{work}/floor-ns/namespaces.yaml", "w") as namespaces, open(f"{work}/floor/objects.json", "w") as out, \
        open(f"{work}/floor-bundles/bundles.json", "w") as by_bundle:
    for i in range(1, bundles + 1):
        ns, ns_bundle, name = f"floor-{run_id}-{i}", f"floor-bundles-{run_id}-{i}", f"floor-{run_id}-{i}"
        namespaces.write(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n")
        namespaces.write(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns_bundle}\n---\n")
        for j in range(objects):
            out.write(json.dumps(configmap(j, ns)) + "\n")
        # A Bundle as the benchmark's (its class aside), its status, then its objects.
        by_bundle.write(json.dumps({"apiVersion": "gantry.dev/v1alpha1", "kind": "Bundle", "metadata": {"name": name},
                                    "spec": {"image": f"{registry}/bench/scale:{run_id}", "installNamespace": ns_bundle,
                                             "provisionerClassName": "floor"},
                                    "status": status(name, ns_bundle)}) + "\n")
        for j in range(objects):
            by_bundle.write(json.dumps(configmap(j, ns_bundle)) + "\n")
PY
  create_fast "$work/floor-ns"
  echo "==> floor: apply-floor, $BUNDLES x $OBJECTS ConfigMaps, concurrency ${FLOOR_CONCURRENCY:-32}"
  read -r floor _ < <("$APPLY_FLOOR" --concurrency "${FLOOR_CONCURRENCY:-32}" "$work/floor")
  echo "==> floor with the Bundles: apply-floor --bundles, per bundle its Bundle created, its $OBJECTS ConfigMaps applied, its status written, concurrency ${FLOOR_CONCURRENCY:-32}"
  read -r floor_bundles _ < <("$APPLY_FLOOR" --bundles --concurrency "${FLOOR_CONCURRENCY:-32}" "$work/floor-bundles")
  # Had the provisioner written to one (it had not seen the class yet), that floor counts its writes.
  touched="$(kubectl get bundles --show-managed-fields --no-headers \
    -o custom-columns='MANAGERS:.metadata.managedFields[*].manager' | grep -c gantry || true)"
  ((touched == 0)) || echo "  $touched of the floor's Bundles were written by the provisioner too"
  # Gantry's Bundles do not exist yet: these are the floor's, deleted in one request so that
  # Gantry's provisioner does not keep them while it is measured.
  kubectl delete --raw /apis/gantry.dev/v1alpha1/bundles >/dev/null
  left="$(kubectl get bundles --no-headers 2>/dev/null | wc -l)"
  ((left == 0)) || { echo "$left of the floor's Bundles still exist after their deletion" >&2; exit 1; }
fi

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

registry_requests() {
  curl -sf "$GANTRY_REGISTRY_METRICS_URL" | awk '/^registry_http_requests_total/ { total += $NF } END { printf "%d\n", total }'
}


# Bundles whose Ready column is True (for a message only: the wait below watches).
ready_count() {
  kubectl get bundles 2>/dev/null | awk '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == "READY") col = i; next }
    col && $col == "True" { n++ }
    END { print n + 0 }'
}

echo "==> creating $BUNDLES bundles of $OBJECTS objects"
initial="$(writes)"
registry_initial="$(registry_requests)"
api_requests_snapshot "$work/requests-before"
start="$(now)"
create_fast "$work/bundles"
created="$(python3 -c "print(f'{$(now) - $start:.1f}')")"
echo "  the $BUNDLES Bundles created in ${created}s"
wait_ready_count bundles "$BUNDLES" "$READY_DEADLINE" ||
  { echo "only $(ready_count) of $BUNDLES Ready after $READY_DEADLINE s" >&2; exit 1; }
all_ready="$(python3 -c "print($(now) - $start)")"
peak_install="$(peak_rss_replicas)"
api_requests_snapshot "$work/requests-after"
echo "  requests while installing, by verb and resource (the benchmark's own lists included):"
api_requests_delta "$work/requests-before" "$work/requests-after"

echo "==> all Ready in ${all_ready}s; measuring ${STEADY_SECONDS}s of steady state"
before="$(writes)"
registry_before="$(registry_requests)"
cpu_before="$(cpu_replicas)"
sleep "$STEADY_SECONDS"
cpu_after="$(cpu_replicas)"
registry_after="$(registry_requests)"
after="$(writes)"
# The two `kubectl get --raw /metrics` calls above are reads; nothing else runs.
steady_writes=$(( after - before ))
cpu_percent="$(python3 -c "print(f'{($cpu_after - $cpu_before) / $STEADY_SECONDS * 100:.2f}')")"

slot_table() {
  kubectl -n gantry-system get lease gantry-shard-slots -o jsonpath='{.metadata.annotations.gantry\.dev/slot-table}'
}
# `NAME SHARD SLOT` of every bundle: the owner of its slot in the slot table.
assignment() {
  kubectl get bundles --no-headers -o custom-columns='NAME:.metadata.name,SLOT:.metadata.labels.gantry\.dev/slot' >"$work/slots"
  slot_table >"$work/table"
  python3 bench/scale/shards.py assignment "$work/slots" "$work/table" >"$1"
}
# Bundles per shard, as the slot table divides them.
shard_counts() {
  assignment "$work/counts"
  awk '{ print $2 }' "$work/counts" | sort | uniq -c | awk '{ printf "  %-46s %s bundles\n", $2, $1 }'
}

printf '\n%-48s %s\n' "bundles x objects" "${BUNDLES} x ${OBJECTS}"
printf '%-48s %s\n' "provisioner replicas" "$REPLICAS"
printf '%-48s %.1f s (target for 2,000 x 20: 120 s)\n' "time to all Ready" "$all_ready"
[[ -n "$floor" ]] && printf '%-48s %.1f s (Gantry %sx the floor)\n' "floor: apply-floor, the same ConfigMaps" "$floor" "$(ratio "$all_ready" "$floor")"
[[ -n "$floor_bundles" ]] && printf '%-48s %.1f s (Gantry %sx)\n' "floor with each bundle's creation + status write" "$floor_bundles" "$(ratio "$all_ready" "$floor_bundles")"
printf '%-48s %s MiB (at all Ready %s MiB; target 100 MiB)\n' "provisioner peak RSS (largest replica)" "$(peak_rss_replicas)" "$peak_install"
if ((REPLICAS > 1)); then
  for p in "${pids[@]}"; do printf '%-48s %s MiB (now %s)\n' "  replica PID $p peak RSS" "$(peak_rss_mib "$p")" "$(rss_split_mib "$p")"; done
  shard_counts
fi
printf '%-48s %s MiB (%s)\n' "provisioner RSS at the end" "$(awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")" "$(rss_split_mib "$pid")"
printf '%-48s %s\n' "write requests while installing (for scale)" "$(( before - initial ))"
printf '%-48s %s\n' "registry requests while installing" "$(( registry_before - registry_initial ))"
printf '%-48s %s (target 0)\n' "write requests in ${STEADY_SECONDS}s of steady state" "$steady_writes"
printf '%-48s %s%% of one core (target 2%%)\n' "provisioner CPU in ${STEADY_SECONDS}s of steady state" "$cpu_percent"
printf '%-48s %s\n' "registry requests in ${STEADY_SECONDS}s of steady state" "$(( registry_after - registry_before ))"
printf '%-48s %s\n' "load (uptime)" "$(uptime | sed 's/.*load average: //')"

# Waits until every slot has an owner and none is being let go, every bundle has its slot
# label, and the table held still for three looks 2 s apart.
wait_settled() {
  local deadline=$(( $(date +%s) + $1 )) previous="" current steady=0
  while (( $(date +%s) < deadline )); do
    slot_table >"$work/table" 2>/dev/null || true
    current="$(python3 bench/scale/shards.py state "$work/table" 2>/dev/null || echo busy)"
    if [[ "$current" != busy* ]] &&
      [[ "$(kubectl get bundles -l '!gantry.dev/slot' -o name | wc -l)" == 0 ]] &&
      [[ "$current" == "$previous" ]]; then
      steady=$((steady + 1))
      ((steady >= 3)) && return 0
    else
      steady=0
    fi
    previous="$current"
    sleep 2
  done
  return 1
}

if ((REPLICAS > 1)) && [[ "${FAILOVER:-1}" == 1 ]]; then
  leader="$(kubectl -n gantry-system get lease gantry-provisioner -o jsonpath='{.spec.holderIdentity}')"
  victim=""
  for ((i = REPLICAS - 1; i >= 0; i--)); do
    [[ "$leader" == "shard-$i" ]] || { victim="$i"; break; }
  done
  printf '\n==> failover: SIGKILL to shard-%s (PID %s; the sharder is %s)\n' "$victim" "${pids[$victim]}" "$leader"
  assignment "$work/before-kill"
  audit_log="$(find "$work/env" -name audit.log | head -1)"
  api_requests_snapshot "$work/requests-before-kill"
  killed_at="$(now)"
  kill -KILL "${pids[$victim]}"
  # When its Lease expires: the earliest the sharder may give its bundles to others.
  kubectl -n gantry-system get lease "gantry-shard-shard-$victim" -o json | python3 -c '
import datetime, json, sys
spec, killed_at = json.load(sys.stdin)["spec"], float(sys.argv[1])
renewed = datetime.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00")).timestamp()
expires = renewed + spec["leaseDurationSeconds"] - killed_at
print(f"  its Lease expires {expires:.1f} s after the kill")' "$killed_at"
  wait "${pids[$victim]}" 2>/dev/null || true
  deadline=$(( $(date +%s) + 120 ))
  while slot_table >"$work/table" && python3 bench/scale/shards.py owns "$work/table" "shard-$victim"; do
    (( $(date +%s) < deadline )) || { echo "shard-$victim still holds slots 120 s after the kill" >&2; break; }
    sleep 1
  done
  wait_ready_count bundles "$BUNDLES" 300 || echo "not all $BUNDLES bundles Ready after the failover" >&2
  api_requests_snapshot "$work/requests-after-kill"
  python3 bench/scale/shards.py failover "$audit_log" "$work/before-kill" "shard-$victim" "$killed_at" ||
    echo "some bundles of shard-$victim have no new owner holding them" >&2
  echo "  requests from the kill until all Ready again, by verb and resource:"
  api_requests_delta "$work/requests-before-kill" "$work/requests-after-kill"

  added="shard-$REPLICAS"
  printf '\n==> a replica added: %s\n' "$added"
  assignment "$work/before-add"
  api_requests_snapshot "$work/requests-before-add"
  added_at="$(now)"
  mkdir -p "$work/$added"
  "$bench_bin/gantry-provisioner" --kubeconfig "$KUBECONFIG" --storage-url "$GANTRY_STORAGE_URL" \
    --namespace gantry-system --metrics-address 127.0.0.1:0 --scratch-dir "$work/$added" \
    "${provisioner_args[@]}" "${shard_args[@]}" --identity "$added" >"$work/$added/log" 2>&1 &
  extra_pids+=($!)
  # Each look lists the Bundles without a slot label on a loaded API server: the deadline grows
  # with them. It only says when to read the audit log; the figure comes from the log.
  settle_deadline=$((180 + BUNDLES / 25))
  wait_settled "$settle_deadline" ||
    echo "the slot table did not hold still for three looks within ${settle_deadline} s (the time below is from the audit log)" >&2
  wait_ready_count bundles "$BUNDLES" 300 || echo "not all $BUNDLES bundles Ready after the rebalance" >&2
  api_requests_snapshot "$work/requests-after-add"
  python3 bench/scale/shards.py rebalance "$audit_log" "$work/before-add" "$added" "$added_at"
  echo "  requests from the start until settled, by verb and resource:"
  api_requests_delta "$work/requests-before-add" "$work/requests-after-add"
  shard_counts
  if [[ -n "${BENCH_LOGS:-}" ]]; then
    mkdir -p "$BENCH_LOGS"
    cp "$work/before-kill" "$work/before-add" "$BENCH_LOGS/"
    for ((i = 1; i <= REPLICAS; i++)); do cp "$work/shard-$i/log" "$BENCH_LOGS/shard-$i.log"; done
  fi
fi

# Flux's column (FLUX=0 leaves it out): the same image as OCIRepository + Kustomization pairs,
# after Gantry's figures, on the same API server (see bench/flux/lib.sh).
if [[ "${FLUX:-1}" == 1 ]]; then
  printf '\n'
  flux_scale "$work" "$GANTRY_REGISTRY/bench/scale:$run_id" "$BUNDLES" "$run_id"
fi
