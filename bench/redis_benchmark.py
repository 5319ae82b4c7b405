#!/usr/bin/env python3
"""redis-benchmark against hybridkv and against redis-server, side by side in one run.

Starts both servers (each in a temporary directory, on free loopback ports), then runs the same
redis-benchmark command against each alternately (A B A B ...) for --rounds rounds, with and
without pipelining, and appends a markdown table of requests/s, p50 and p99 per test (medians,
and hybridkv's p99 of each round, so that one slow round shows) and the per-round ratios with
their median to bench/results/redis-benchmark.md, which `hybridkv bench report` includes
verbatim in bench/RESULTS.md.

Durability is matched as the other benchmarks match it: hybridkv `periodic` against Redis
`appendonly yes, appendfsync everysec`, or `always` against `appendfsync always`.

    bench/redis_benchmark.py [--requests 200000] [--keyspace N] [--rounds 3] [--data-bytes 440]
        [--durability periodic|always] [--tests set,get,incr,mset,hset | --command "XADD s * f v"]

--command runs one command of your own instead of redis-benchmark's tests (its words split on
spaces; `__rand_int__` is replaced by redis-benchmark, -d does not apply).
"""

import argparse
import csv
import datetime
import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Ports as the end-to-end tests choose them (below the kernel's ephemeral range).
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from conftest import free_port  # noqa: E402
BINARY = os.path.join(ROOT, "target", "release", "hybridkv")
RESULTS = os.path.join(ROOT, "bench", "results", "redis-benchmark.md")
# redis-benchmark's HSET adds fields to ONE hash (field element:__rand_int__): a big hash is a root
# record plus buckets (crates/server/src/hash_layout.rs), so each request writes one bucket.
TESTS = "set,get,incr,mset,hset"
CLIENTS = 50
# redis-benchmark -d: the workloads' 440-byte values unless --data-bytes says otherwise.
VALUE_BYTES = 440
PIPELINES = (1, 16)
START_TIMEOUT_S = 60
REDIS_FSYNC = {"periodic": "everysec", "always": "always"}


def wait_for_port(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"server on port {port} exited with {process.returncode} before accepting connections")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"server on port {port} did not accept connections within {START_TIMEOUT_S} s")


def start_servers(workdir: str, durability: str):
    hybridkv_port, redis_port = free_port(), free_port()
    hybridkv = subprocess.Popen(
        [BINARY, "serve", "--port", str(hybridkv_port), "--dir", os.path.join(workdir, "hybridkv"),
         "--shmem-dir", os.path.join(workdir, "shm"), "--durability", durability],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    redis_dir = os.path.join(workdir, "redis")
    os.makedirs(redis_dir)
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", redis_dir, "--save", "",
         "--appendonly", "yes", "--appendfsync", REDIS_FSYNC[durability]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(hybridkv_port, hybridkv)
    wait_for_port(redis_port, redis)
    return [("hybridkv", hybridkv_port, hybridkv), ("redis", redis_port, redis)]


def benchmark_command(port: int, arguments: argparse.Namespace, pipeline: int) -> list:
    keyspace = arguments.keyspace or arguments.requests
    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS), "-d", str(arguments.data_bytes),
               "-n", str(arguments.requests), "-r", str(keyspace), "-P", str(pipeline), "--csv"]
    return command + (arguments.command.split() if arguments.command else ["-t", arguments.tests])


def run_benchmark(port: int, arguments: argparse.Namespace, pipeline: int) -> dict:
    """Test name -> (requests/s, p50 ms, p99 ms), from redis-benchmark's CSV output."""
    result = subprocess.run(benchmark_command(port, arguments, pipeline), capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        sys.exit(f"redis-benchmark failed: {result.stderr.strip()}")
    rows = {}
    for row in csv.DictReader(io.StringIO(result.stdout)):
        rows[row["test"]] = (float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"]))
    if not rows:
        sys.exit(f"redis-benchmark printed no results: {result.stdout[:500]}")
    return rows


def markdown(arguments: argparse.Namespace, measured: dict, port_note: str) -> str:
    durability, requests, rounds = arguments.durability, arguments.requests, arguments.rounds
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    load = open("/proc/loadavg").read().split()[0]
    lines = [
        "", f"### redis-benchmark, hybridkv durability {durability} vs Redis appendfsync {REDIS_FSYNC[durability]} "
        f"({now}, commit {commit}, load {load})", "", "```",
        f"bench/redis_benchmark.py --requests {requests} --keyspace {arguments.keyspace or requests} --rounds {rounds} "
        f"--durability {durability} --data-bytes {arguments.data_bytes} " + (f"--command '{arguments.command}'" if arguments.command else f"--tests {arguments.tests}"), "```", "",
        f"Each round runs, against each server in turn: `{' '.join(benchmark_command(0, arguments, 1)).replace(' -p 0', ' -p PORT')}` "
        f"(and the same with `-P 16`). {port_note} Ratios above 1 favour hybridkv.", "",
        "| pipeline | test | hybridkv req/s (median) | Redis req/s (median) | ratio per round | median ratio | hybridkv p50 / p99 ms | hybridkv p99 ms per round | Redis p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pipeline in PIPELINES:
        for test in measured[pipeline]["hybridkv"][0]:
            ours = [round_rows[test] for round_rows in measured[pipeline]["hybridkv"]]
            theirs = [round_rows[test] for round_rows in measured[pipeline]["redis"]]
            ratios = [a[0] / b[0] for a, b in zip(ours, theirs)]
            median = lambda values, index: statistics.median(value[index] for value in values)
            lines.append(
                f"| {pipeline} | {test} | {median(ours, 0):.0f} | {median(theirs, 0):.0f} | "
                f"{' '.join(f'{ratio:.2f}×' for ratio in ratios)} | **{statistics.median(ratios):.2f}×** | "
                f"{median(ours, 1):.3f} / {median(ours, 2):.3f} | {' '.join(f'{row[2]:.3f}' for row in ours)} | "
                f"{median(theirs, 1):.3f} / {median(theirs, 2):.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200_000, help="requests per test and run (default 200000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--durability", choices=sorted(REDIS_FSYNC), default="periodic")
    parser.add_argument("--keyspace", type=int, default=0, help="redis-benchmark -r (default: --requests)")
    parser.add_argument("--data-bytes", type=int, default=VALUE_BYTES, help=f"redis-benchmark -d: bytes of each value or element (default {VALUE_BYTES}; redis-benchmark's own default is 3)")
    parser.add_argument("--tests", default=TESTS, help=f"redis-benchmark -t (default {TESTS})")
    parser.add_argument("--command", default="", help="a command of your own instead of --tests (words split on spaces)")
    arguments = parser.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing: apt-get install -y redis-server (scripts/setup-python.sh does it)")
    if not os.access(BINARY, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "hybridkv"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory(prefix="hybridkv-redis-benchmark-") as workdir:
        servers = start_servers(workdir, arguments.durability)
        try:
            measured = {pipeline: {name: [] for name, _, _ in servers} for pipeline in PIPELINES}
            for round_number in range(1, arguments.rounds + 1):
                for pipeline in PIPELINES:
                    for name, port, _ in servers:
                        print(f"round {round_number}, pipeline {pipeline}: {name}", file=sys.stderr, flush=True)
                        measured[pipeline][name].append(run_benchmark(port, arguments, pipeline))
        finally:
            for _, _, process in servers:
                process.terminate()
                process.wait(timeout=60)
    text = markdown(arguments, measured,
                    "hybridkv runs its default placement (index pmem, records ssd).")
    with open(RESULTS, "a") as results:
        results.write(text)
    print(text)


if __name__ == "__main__":
    main()
