#!/usr/bin/env bash
# Two builds of hybridkv under one redis-benchmark test, alternating (A B A B ...) ROUNDS times, each
# against a fresh server in its own data directory; appends a table to bench/results/compare-builds.md
# (included verbatim in bench/RESULTS.md by `hybridkv bench report`): requests/s, p50/p99 in ms and
# the server's INFO counters flushes and defragmented_blocks, then the median ratio B ÷ A.
#
# Usage: bench/compare-builds.sh BINARY_A BINARY_B [SERVE_ARGS...]
#   e.g. bench/compare-builds.sh /tmp/old/hybridkv target/release/hybridkv --durability periodic
# Environment: ROUNDS (3), TEST (set), PIPELINE (1), REQUESTS (400000), KEYSPACE (100000),
# CLIENTS (50), VALUE_BYTES (440), RESULTS (the file appended to).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
binary_a=$1 binary_b=$2
shift 2
rounds=${ROUNDS:-3} test=${TEST:-set} pipeline=${PIPELINE:-1} requests=${REQUESTS:-400000}
keyspace=${KEYSPACE:-100000} clients=${CLIENTS:-50} value_bytes=${VALUE_BYTES:-440}
results=${RESULTS:-bench/results/compare-builds.md}
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is needed (apt-get install -y redis-tools)" >&2; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
info_field() { redis-cli -p "$1" info | tr -d '\r' | awk -F: -v name="$2" '$1 ~ (name "$") {sum += $2} END {print sum + 0}'; }

# Prints "requests/s p50 p99 flushes defragmented_blocks" of one run of BINARY.
measure() {
    local binary=$1 dir port pid row
    shift
    dir=$(mktemp -d)
    port=$(free_port)
    "$binary" serve --port "$port" --dir "$dir/data" --shmem-dir "$dir/shm" "$@" >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    # CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    row=$(redis-benchmark -p "$port" -c "$clients" -d "$value_bytes" -n "$requests" -r "$keyspace" -t "$test" -P "$pipeline" --csv | tail -1 | tr -d '"')
    echo "$(echo "$row" | awk -F, '{print $2, $5, $7}') $(info_field "$port" _flushes) $(info_field "$port" defragmented_blocks)"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}

{
    echo
    echo "### compare-builds: redis-benchmark $test -P $pipeline ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo '```'
    echo "ROUNDS=$rounds TEST=$test PIPELINE=$pipeline REQUESTS=$requests KEYSPACE=$keyspace bench/compare-builds.sh $binary_a $binary_b $*"
    echo '```'
    echo
    echo "A: \`$binary_a\` ($(sha256sum "$binary_a" | cut -c1-12)), B: \`$binary_b\` ($(sha256sum "$binary_b" | cut -c1-12)); $clients clients, $value_bytes-byte values; machine load (1 min) $(cut -d' ' -f1 /proc/loadavg) at the start."
    echo
    echo "| round | build | requests/s | p50 ms | p99 ms | flushes | defragmented blocks |"
    echo "|---|---|---|---|---|---|---|"
} >>"$results"
ratios=()
for round in $(seq "$rounds"); do
    read -r rate_a p50_a p99_a flushes_a defrag_a <<<"$(measure "$binary_a" "$@")"
    read -r rate_b p50_b p99_b flushes_b defrag_b <<<"$(measure "$binary_b" "$@")"
    echo "| $round | A | $rate_a | $p50_a | $p99_a | $flushes_a | $defrag_a |" >>"$results"
    echo "| $round | B | $rate_b | $p50_b | $p99_b | $flushes_b | $defrag_b |" >>"$results"
    ratios+=("$(python3 -c "print(f'{$rate_b / $rate_a:.3f}')")")
    echo "round $round: A $rate_a/s, B $rate_b/s, B/A ${ratios[-1]}"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
{
    echo
    echo "B ÷ A requests/s per round: ${ratios[*]}; median **${median}×**."
} >>"$results"
echo "median B/A: $median (appended to $results)"
