#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS_PER_TARGET seconds (default 60) and prints the
# executions of each. Needs the nightly toolchain; installs cargo-fuzz from crates.io if missing.
# With FUZZ_SKIP_IF_UNAVAILABLE=1 (what scripts/test-all.sh sets), a missing nightly toolchain or
# cargo-fuzz is reported and skipped instead of failing. Findings land in fuzz/artifacts/<target>/
# (reproduce one with: cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>); the
# corpus grows in fuzz/corpus/<target>/ (both ignored by git).
#
# FUZZ_RUNS=N runs N inputs per target from a fixed seed instead (deterministic, for the test
# command).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
skip_if_unavailable="${FUZZ_SKIP_IF_UNAVAILABLE:-0}"

unavailable() {
    if [ "$skip_if_unavailable" = 1 ]; then
        echo "fuzz: skipped: $1"
        exit 0
    fi
    echo "fuzz: $1" >&2
    exit 1
}

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    unavailable "no nightly toolchain (rustup toolchain install nightly)"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    if [ "$skip_if_unavailable" = 1 ]; then
        unavailable "cargo-fuzz is not installed (cargo install cargo-fuzz)"
    fi
    cargo install cargo-fuzz
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

if ! build_log="$(cargo +nightly fuzz build -O 2>&1)"; then
    echo "$build_log" | tail -40
    echo "fuzz: the targets do not build" >&2
    exit 1
fi

failed=0
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    log="$(mktemp)"
    status=0
    if [ -n "${FUZZ_RUNS:-}" ]; then
        budget=(-runs="$FUZZ_RUNS" -seed=1)
        what="$FUZZ_RUNS runs"
    else
        budget=(-max_total_time="$seconds")
        what="$seconds s"
    fi
    cargo +nightly fuzz run -O "$target" -- "${budget[@]}" -print_final_stats=1 >"$log" 2>&1 || status=$?
    executions="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)"
    if [ "$status" -ne 0 ]; then
        failed=1
        echo "fuzz: $target: FAILED after ${executions:-?} executions (exit $status); see fuzz/artifacts/$target/"
        grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -10 || true
    else
        echo "fuzz: $target: ${executions:-?} executions ($what), no finding"
    fi
    rm -f "$log"
done
exit "$failed"
