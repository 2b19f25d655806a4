#!/usr/bin/env bash
# Writes: what one write of a Bundle costs the API server, against a ConfigMap of the same bytes.
# BUNDLES Bundles naming a class of another provisioner (Gantry leaves them alone) get the
# status Gantry writes for an installed bundle of OBJECTS ConfigMaps; as many ConfigMaps get
# that status's JSON as data. Then every object's labels are patched (a merge patch, as the
# sharder's and a handover's writes), CONCURRENCY at once, in ROUNDS alternating rounds.
# Printed per round: writes a second, and kube-apiserver's CPU per write (utime+stime from
# /proc, so only on the machine that runs it); then the ratios. This is the rate that bounds how
# fast bundles move between shards (docs/scaling.md).
#
#   bash bench/writes/run.sh                      # 2000 of each, 20 objects, 64 at once, 3 rounds
#   BUNDLES=5000 CONCURRENCY=128 bash bench/writes/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck disable=SC1091
source bench/lib.sh

BUNDLES="${BUNDLES:-2000}"
OBJECTS="${OBJECTS:-20}"
CONCURRENCY="${CONCURRENCY:-64}"
ROUNDS="${ROUNDS:-3}"
command -v python3 >/dev/null || { echo "missing python3" >&2; exit 1; }
work="$(mktemp -d)"
trap 'bench_down; rm -rf "$work"' EXIT
bench_up "$work/env"
trap 'bench_down; rm -rf "$work"' EXIT

# The client certificate of the environment's kubeconfig, for the Python client.
for key in client-certificate-data client-key-data; do
  kubectl config view --raw -o "jsonpath={.users[0].user.$key}" | base64 -d >"$work/$key"
done
kubectl config view --raw -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}' |
  base64 -d >"$work/ca"
server="$(kubectl config view -o 'jsonpath={.clusters[0].cluster.server}')"
apiserver_pid="$(pgrep -f "kube-apiserver.*--secure-port=${server##*:}" | head -1)"
[[ -n "$apiserver_pid" ]] || { echo "kube-apiserver of $server not found" >&2; exit 1; }

# A class of another installation: Gantry neither assigns nor reconciles its bundles.
kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: gantry.dev/v1alpha1
kind: ProvisionerClass
metadata:
  name: bench-writes-elsewhere
spec:
  provisioner: bench.example/elsewhere
YAML

printf '%s Bundles and ConfigMaps, the status of a bundle of %s ConfigMaps each, %s writes at once\n' \
  "$BUNDLES" "$OBJECTS" "$CONCURRENCY"
python3 bench/writes/writes.py "$server" "$work" "$apiserver_pid" "$BUNDLES" "$OBJECTS" \
  "$CONCURRENCY" "$ROUNDS"
