#!/usr/bin/env bash
# Runs every test: Rust unit, scenario and crash tests, then the end-to-end tests against the
# release binary. Installs what the tests need first (idempotent). The last line is pytest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x scripts/setup-python.sh ]; then
    scripts/setup-python.sh
fi

cargo build --release --workspace
test_log=$(mktemp /tmp/hybridkv-cargo-test.XXXXXX.log)
trap 'rm -f "$test_log"' EXIT
# Optimised tests (profile release-tests: release without LTO, so the test binaries link fast):
# the power-cut, fault and corruption campaigns run short versions (docs/RELIABILITY.md has the
# commands of the long ones). The end-to-end tests below run the release binary built above.
cargo test --profile release-tests --workspace 2>&1 | tee "$test_log" | grep -E '^(test result|running|error|failures:|---- )' || true
if grep -qE '^test result: FAILED|^error' "$test_log"; then
    cat "$test_log" | tail -60
    echo "cargo test failed"
    exit 1
fi

# A short deterministic fuzz run of every target (scripts/fuzz.sh SECONDS for a real campaign);
# skipped with a message where the nightly toolchain or cargo-fuzz is missing.
FUZZ_SKIP_IF_UNAVAILABLE=1 FUZZ_RUNS=20000 scripts/fuzz.sh

if [ -d tests/e2e ] && [ -x .venv/bin/python ]; then
    rm -f "$test_log"
    exec .venv/bin/python -m pytest tests/e2e -q
fi
grep -E '^test result' "$test_log" | awk '{p += $4; f += $6} END {printf "%d passed, %d failed\n", p, f}'
