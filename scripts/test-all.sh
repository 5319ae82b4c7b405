#!/usr/bin/env bash
# Runs every test: Rust unit, scenario and crash tests, then the end-to-end tests against the
# release binary. Installs what the tests need first (idempotent). The last line is pytest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x scripts/setup-python.sh ]; then
    scripts/setup-python.sh
fi

cargo build --release --workspace
# Release-optimised tests: the power-cut, fault and corruption campaigns run short versions
# (docs/RELIABILITY.md has the commands of the long ones).
cargo test --release --workspace 2>&1 | tee /tmp/hybridkv-cargo-test.log | grep -E '^(test result|running|error|failures:|---- )' || true
if grep -qE '^test result: FAILED|^error' /tmp/hybridkv-cargo-test.log; then
    cat /tmp/hybridkv-cargo-test.log | tail -60
    echo "cargo test failed"
    exit 1
fi

# A short deterministic fuzz run of every target (scripts/fuzz.sh SECONDS for a real campaign);
# skipped with a message where the nightly toolchain or cargo-fuzz is missing.
FUZZ_SKIP_IF_UNAVAILABLE=1 FUZZ_RUNS=20000 scripts/fuzz.sh

if [ -d tests/e2e ] && [ -x .venv/bin/python ]; then
    exec .venv/bin/python -m pytest tests/e2e -q
fi
grep -E '^test result' /tmp/hybridkv-cargo-test.log | awk '{p += $4; f += $6} END {printf "%d passed, %d failed\n", p, f}'
