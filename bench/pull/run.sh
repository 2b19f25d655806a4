#!/usr/bin/env bash
# Pull benchmark: `kubectl bundle pull` (pull, verify, unpack, validate, write) against
# `skopeo copy` to a directory followed by extracting its layers with `tar`, for a typical
# bundle (about 100 KB) and a large one (about 200 MB of YAML in 4 layers, multi-platform
# index), both served by a local docker-registry on loopback.
#
#   bash bench/pull/run.sh            # RUNS=5 by default; BENCH_DIR caches the generated images
#   PULL_SIZES="tiny 20000 1,small 400000 2" RUNS=1 bash bench/pull/run.sh   # other sizes: name,
#                                     # bytes of YAML, layers (bench/smoke runs them this small)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

for program in docker-registry skopeo tar python3; do
  command -v "$program" >/dev/null || { echo "missing: $program" >&2; exit 1; }
done

# BENCH_PROFILE=debug (bench/smoke) runs the debug build; BENCH_PREBUILT=1 does not build.
profile="${BENCH_PROFILE:-release}"
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
if [[ "$profile" == release ]]; then
  [[ -n "${BENCH_PREBUILT:-}" ]] || { echo "==> cargo build --release -p kubectl-bundle" >&2; cargo build --quiet --release -p kubectl-bundle; }
  plugin="$target_dir/release/kubectl-bundle"
else
  [[ -n "${BENCH_PREBUILT:-}" ]] || { echo "==> cargo build -p kubectl-bundle" >&2; cargo build --quiet -p kubectl-bundle; }
  plugin="$target_dir/debug/kubectl-bundle"
fi

bench_dir="${BENCH_DIR:-${TMPDIR:-/tmp}/gantry-bench-pull}"
mkdir -p "$bench_dir"
work="$(mktemp -d "${TMPDIR:-/tmp}/gantry-bench-pull-run.XXXXXX")"

# A registry of our own on a free loopback port.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
host="127.0.0.1:$port"
cat >"$work/registry.yml" <<YAML
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $work/storage
http:
  addr: $host
YAML
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
cleanup() {
  kill "$registry_pid" 2>/dev/null || true
  wait "$registry_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.1
done

# name, bytes of YAML, layers; comma-separated
IFS=, read -r -a sizes <<<"${PULL_SIZES:-typical 100000 1,large 200000000 4}"
names=()
for entry in "${sizes[@]}"; do
  read -r name bytes layers <<<"$entry"
  layout="$bench_dir/$name-$bytes-$layers"
  if [[ ! -f "$layout/index.json" ]]; then
    echo "==> generating the $name bundle ($bytes bytes of YAML, $layers layers)" >&2
    rm -rf "$layout"
    python3 bench/pull/gen.py "$layout" "$bytes" "$layers" linux/amd64 linux/arm64
  fi
  skopeo copy --quiet --all --dest-tls-verify=false "oci:$layout:bench" "docker://$host/bench/$name:v1"
  names+=("$name")
done

python3 bench/pull/bench.py "$plugin" "$host" "$work" "${RUNS:-5}" "${names[@]}"
