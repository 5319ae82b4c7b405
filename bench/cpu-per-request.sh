#!/usr/bin/env bash
# The server's CPU time per request (user + system, from /proc/PID/stat) under one redis-benchmark
# test, on a fresh server (durability periodic) preloaded with 200,000 SETs: a steadier measure of
# a per-request cost than requests/s on a shared 2-core machine.
#
# Usage: bench/cpu-per-request.sh BINARY TEST PIPELINE REQUESTS
#   e.g. bench/cpu-per-request.sh target/release/hybridkv get 16 2000000
set -euo pipefail
[ $# -eq 4 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
binary=$1 test=$2 pipeline=$3 requests=$4
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$binary" serve --port "$port" --dir "$dir/data" --shmem-dir "$dir/shm" --durability periodic >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p "$port" -c 50 -d 440 -n 200000 -r 200000 -t set -P 16 -q >/dev/null
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
before=$(ticks)
redis-benchmark -p "$port" -c 50 -d 440 -n "$requests" -r 200000 -t "$test" -P "$pipeline" -q >/dev/null
after=$(ticks)
python3 -c "print(f'{($after - $before) * 1e6 / $(getconf CLK_TCK) / $requests:.3f} us of server CPU per request')"
kill "$pid"
wait "$pid" 2>/dev/null || true
rm -rf "$dir"
