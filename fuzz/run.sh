#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 60), at low priority, on the
# nightly toolchain with cargo-fuzz, then prints executions, time and findings per target.
# Seeds from fuzz/seeds/<target>/ start each corpus (fuzz/corpus/<target>/, kept between
# runs); crashes, timeouts and out-of-memory inputs land in fuzz/artifacts/<target>/.
#
#   fuzz/run.sh 120                       # all targets, two minutes each
#   FUZZ_TARGETS="layer objects" fuzz/run.sh 60
#   FUZZ_SANITIZER=none fuzz/run.sh 60     # faster runs without AddressSanitizer
#
# Exits non-zero when a target found a crash, a hang (over 10 s for one input) or an input
# that needs more than 2 GiB.
set -euo pipefail

seconds=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
targets=${FUZZ_TARGETS:-"layer objects reference auth_challenge storage_path storage_range"}
sanitizer=${FUZZ_SANITIZER:-address}

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 2
fi

mkdir -p logs
for target in $targets; do
    nice -n 10 cargo +nightly fuzz build --sanitizer "$sanitizer" "$target" >&2
done

summary=()
failed=0
for target in $targets; do
    mkdir -p "corpus/$target" "artifacts/$target"
    if [ -d "seeds/$target" ]; then
        cp -n "seeds/$target"/* "corpus/$target"/ 2>/dev/null || true
    fi
    before=$(find "artifacts/$target" -type f | wc -l)
    log="logs/$target.log"
    start=$(date +%s)
    # libFuzzer exits non-zero on a finding; the summary below reports it.
    nice -n 10 cargo +nightly fuzz run --sanitizer "$sanitizer" "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1 || true
    took=$(($(date +%s) - start))
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    corpus=$(find "corpus/$target" -type f | wc -l)
    after=$(find "artifacts/$target" -type f | wc -l)
    found=$((after - before))
    if [ "$found" -gt 0 ] || grep -q '^==[0-9]*== *ERROR\|^SUMMARY: libFuzzer' "$log"; then
        failed=1
        verdict="FINDING (see $log and artifacts/$target/)"
    else
        verdict="no finding"
    fi
    summary+=("$(printf '%-16s %6ss %12s execs %7s corpus  %s' "$target" "$took" "${execs:-?}" "$corpus" "$verdict")")
done

echo
echo "fuzzing, $seconds s per target, sanitizer $sanitizer:"
printf '%s\n' "${summary[@]}"
exit "$failed"
