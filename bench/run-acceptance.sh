#!/usr/bin/env bash
# The acceptance runs of issue 4, in the order bench/RESULTS.md shows them. Each measurement is
# bounded (10 s for comparisons, 5 s per placement in the matrix) because the 2-core machine is
# shared. Writes bench/results/*.json and *.png, then regenerates bench/RESULTS.md.
# Usage: bench/run-acceptance.sh [small|restart-10m|pipelined|all]   (default: small)
set -euo pipefail
cd "$(dirname "$0")/.."
part="${1:-small}"
bench=./target/release/hybridkv
cargo build --release -p hybridkv

if [ "$part" = small ] || [ "$part" = all ]; then
    for workload in mix-50-50 read-only write-only mix-70-30; do
        "$bench" bench --workload "$workload" --compare redis --duration 10s
    done
    "$bench" bench --workload messaging --compare redis --durability always --duration 10s
    "$bench" bench --workload scan --compare redis --keys 1000000
    "$bench" bench --workload restart --compare redis --keys 1000000 --redis-restart-from aof
    "$bench" bench --workload restart --compare redis --keys 1000000 --redis-restart-from rdb
    "$bench" bench --workload restart --compare redis --keys 1000000 --stop kill
    for workload in mix-50-50 read-only write-only mix-70-30; do
        "$bench" bench --workload "$workload" --matrix --duration 5s
    done
fi
if [ "$part" = restart-10m ] || [ "$part" = all ]; then
    "$bench" bench --workload restart --compare redis --keys 10000000 --redis-restart-from aof
    "$bench" bench --workload restart --compare redis --keys 10000000 --redis-restart-from rdb
fi
if [ "$part" = pipelined ] || [ "$part" = all ]; then
    # BRIEF.md: Redis does ~1.7 M ops/s with 16-deep pipelines on one core; compare there too.
    for workload in mix-50-50 read-only write-only mix-70-30; do
        "$bench" bench --workload "$workload" --compare redis --pipeline 16 --duration 10s
    done
fi
"$bench" bench report
