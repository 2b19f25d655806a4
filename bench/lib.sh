# Shared by the benchmarks: builds release binaries (debug ones with BENCH_PROFILE=debug), starts a local environment (real
# kube-apiserver + etcd, registry, storage server, provisioner on 127.0.0.1) and stops it.
# Source it from a benchmark script after `cd` to the repository root.

bench_state=""

# BENCH_PROFILE=debug runs the debug builds (target/debug, what `cargo build --workspace --bins`
# makes) instead of release ones: bench/smoke uses it, as it checks that each benchmark runs
# and prints its table, not how fast. Figures of a debug build mean nothing.
BENCH_PROFILE="${BENCH_PROFILE:-release}"
case "$BENCH_PROFILE" in
  release | debug) ;;
  *) echo "BENCH_PROFILE=$BENCH_PROFILE: use release or debug" >&2; exit 2 ;;
esac
bench_bin="target/$BENCH_PROFILE"

bench_up() {
  # Usage: bench_up STATE_DIR [provisioner flags...]
  bench_state="$1"
  shift
  for program in go docker-registry kubectl; do
    command -v "$program" >/dev/null || { echo "missing $program: run 'bash .ci/run' once" >&2; exit 1; }
  done
  GANTRY_CONTROL_PLANE_DIR="$(bash tools/control-plane/build.sh)"
  export GANTRY_CONTROL_PLANE_DIR
  APPLY_FLOOR="$(apply_floor_dir)/apply-floor"
  export APPLY_FLOOR
  # BENCH_PREBUILT=1 runs the binaries as they are (a build of another change may be
  # under way).
  if [[ -z "${BENCH_PREBUILT:-}" ]]; then
    bench_build
  fi
  export GANTRY_BINARIES_BUILT=1
  export PATH="$PWD/$bench_bin:$PATH"
  "$bench_bin/gantry-dev" --state-dir "$bench_state" down >/dev/null 2>&1 || true
  local args=()
  for flag in "$@"; do args+=("--provisioner-arg=$flag"); done
  "$bench_bin/gantry-dev" --state-dir "$bench_state" up "${args[@]}" >/dev/null
  trap bench_down EXIT
  # shellcheck disable=SC1090,SC1091
  source "$bench_state/env"
  # The shipped classes apply bundles as the ServiceAccount gantry-applier (02 and 03).
  kubectl apply --server-side -f manifests/00-namespace.yaml -f manifests/02-serviceaccounts.yaml \
    -f manifests/03-rbac-provisioner.yaml -f manifests/20-classes.yaml >/dev/null
  kubectl patch provisionerclass plain --type merge \
    -p "{\"spec\":{\"insecureRegistries\":[\"$GANTRY_REGISTRY\"]}}" >/dev/null
}

# The directory of apply-floor (tools/control-plane/cmd/apply-floor), built into the
# control-plane cache if needed: $GANTRY_CONTROL_PLANE_DIR's, when it has one (scripts/test sets
# that variable to the cache directory, which has none until it is built).
apply_floor_dir() {
  if [[ -n "${GANTRY_CONTROL_PLANE_DIR:-}" && -x "$GANTRY_CONTROL_PLANE_DIR/apply-floor" ]]; then
    echo "$GANTRY_CONTROL_PLANE_DIR"
  else
    GANTRY_CONTROL_PLANE_DIR="" bash tools/control-plane/build.sh apply-floor
  fi
}

# Builds Gantry's binaries in the profile of $BENCH_PROFILE.
bench_build() {
  if [[ "$BENCH_PROFILE" == release ]]; then
    echo "==> cargo build --release (Gantry's binaries)" >&2
    cargo build --release --quiet --workspace --bins
  else
    echo "==> cargo build (Gantry's binaries, debug)" >&2
    cargo build --quiet --workspace --bins
  fi
}

# BENCH_LOGS=DIR keeps the logs of the environment (provisioner, storage, registry, API server)
# in DIR when the benchmark ends.
bench_down() {
  if [[ -n "$bench_state" && -n "${BENCH_LOGS:-}" ]]; then
    mkdir -p "$BENCH_LOGS"
    find "$bench_state" -name '*.log' -exec cp {} "$BENCH_LOGS/" \; 2>/dev/null || true
  fi
  [[ -n "$bench_state" ]] && "$bench_bin/gantry-dev" --state-dir "$bench_state" down >/dev/null 2>&1 || true
}

# Creates the objects of the YAML files in directory $1, Namespaces and CRDs first, 32 at once
# (server-side apply by apply-floor): a benchmark that creates thousands of objects must not
# measure kubectl creating them one after another.
create_fast() {
  "$APPLY_FLOOR" --concurrency 32 "$1" >/dev/null 2>"$1/create.log" || { cat "$1/create.log" >&2; return 1; }
}

# Waits until $2 objects of resource $1 (kubectl's name; more kubectl flags after $3, such as
# -n NAMESPACE) have the condition Ready=True, for at most $3 seconds. One watch (its first
# listing, then the changes) rather than a list of thousands of objects every second, which
# would load the API server being measured.
wait_ready_count() {
  local resource="$1" want="$2" seconds="$3" fifo watcher status=0
  shift 3
  fifo="$(mktemp -u)"
  mkfifo "$fifo"
  kubectl get "$resource" "$@" --watch --no-headers \
    -o custom-columns='NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status' \
    >"$fifo" 2>/dev/null &
  watcher=$!
  # Line by line as they come (awk, mawk at least, reads a pipe in blocks).
  timeout "$seconds" python3 -c '
import sys
want, ready, count = int(sys.argv[1]), {}, 0
while line := sys.stdin.readline():
    fields = line.split()
    if fields:
        now = len(fields) > 1 and fields[1] == "True"
        count += now - ready.get(fields[0], False)
        ready[fields[0]] = now
        if count >= want:
            sys.exit(0)
sys.exit(1)' "$want" <"$fifo" || status=1
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  rm -f "$fifo"
  return "$status"
}

# Seconds since the epoch, with nanoseconds.
now() { date +%s.%N; }

# Waits until bundle $1 is Ready (deadline $2 seconds).
wait_ready() {
  kubectl wait --for=condition=Ready "bundle/$1" --timeout="${2:-600}s" >/dev/null
}

# Peak resident memory of a process, in MiB.
peak_rss_mib() {
  awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"
}

# RSS now, split: anonymous memory (the heap) and file pages (the binary's code that ran).
rss_split_mib() {
  awk '/RssAnon/ { a = $2 } /RssFile/ { f = $2 } END { printf "%.1f MiB heap and stacks, %.1f MiB file pages", a / 1024, f / 1024 }' "/proc/$1/status"
}

ratio() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{a / b:.2f}')" "$1" "$2"; }
