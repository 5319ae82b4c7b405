#!/usr/bin/env bash
# How the server uses the cores: runs one workload against hybridkv started with each threading
# setting in turn (alternating, ROUNDS times), and appends a table to bench/results/server-threading.md
# (included verbatim in bench/RESULTS.md by `hybridkv bench report`): ops/s from `hybridkv bench`,
# and the server's CPU time per command (user + system, from /proc, over the middle of the run),
# which the noise of a shared machine disturbs less than throughput.
#
# Usage: bench/server-threading.sh [WORKLOAD] [DURABILITY]   (defaults: mix-50-50 periodic)
# Environment: ROUNDS (3), DURATION (8s), KEYS (100000), PORT (7301), RESULTS (the file appended to).
set -euo pipefail
cd "$(dirname "$0")/.."
workload=${1:-mix-50-50}
durability=${2:-periodic}
rounds=${ROUNDS:-3}
duration=${DURATION:-8s}
keys=${KEYS:-100000}
port=${PORT:-7301}
binary=target/release/hybridkv
results=${RESULTS:-bench/results/server-threading.md}
settings=("--threads 1 --engine-calls inline" "--threads 2 --engine-calls inline" "--threads 2 --engine-calls block-in-place")
command -v redis-cli >/dev/null || { echo "redis-cli is needed to read INFO (apt-get install -y redis-tools)" >&2; exit 1; }
[ -x "$binary" ] || cargo build --release -p hybridkv

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
commands() { redis-cli -p "$port" info stats | awk -F: '/^total_commands_processed/ {print $2 + 0}'; }

measure() {
    local setting=$1 dir
    dir=$(mktemp -d)
    # shellcheck disable=SC2086
    "$binary" serve --port "$port" --dir "$dir/data" --shmem-dir "$dir/shm" --durability "$durability" $setting >"$dir/server.log" 2>&1 &
    local server=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    "$binary" bench --addr "127.0.0.1:$port" --workload "$workload" --keys "$keys" --duration "$duration" \
        --warmup 1s --no-plots --results-dir "$dir/results" >"$dir/bench.log" 2>&1 &
    local bench=$!
    # Sample the server's CPU over the middle of the measured phase: after the ingest (every key
    # present) and the warm-up.
    while [ "$(redis-cli -p "$port" dbsize 2>/dev/null || echo 0)" -lt "$keys" ] && kill -0 $bench 2>/dev/null; do sleep 0.2; done
    sleep 2
    local ticks0 commands0 ticks1 commands1
    ticks0=$(cpu_ticks $server); commands0=$(commands)
    sleep 3
    ticks1=$(cpu_ticks $server); commands1=$(commands)
    wait $bench
    local row
    row=$(grep '^| – |' "$dir/bench.log" | head -1)
    kill $server; wait $server 2>/dev/null || true
    local ticks_per_second
    ticks_per_second=$(getconf CLK_TCK)
    local cpu_us
    cpu_us=$(awk -v t=$((ticks1 - ticks0)) -v c=$((commands1 - commands0)) -v h="$ticks_per_second" 'BEGIN {printf "%.1f", t * 1e6 / h / c}')
    echo "| $setting | $(echo "$row" | awk -F'|' '{print $4 "|" $5 "|" $6}') | $cpu_us |"
    rm -rf "$dir"
}

{
    echo
    echo "### Server threading, $workload, durability $durability ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1 /proc/loadavg))"
    echo
    echo '```'
    echo "bench/server-threading.sh $workload $durability   # ROUNDS=$rounds DURATION=$duration KEYS=$keys"
    echo '```'
    echo
    echo "| serve flags | ops/s | p50 µs | p99 µs | server CPU µs per command |"
    echo "|---|---|---|---|---|"
    for _ in $(seq "$rounds"); do
        for setting in "${settings[@]}"; do
            measure "$setting"
        done
    done
} | tee -a "$results"
