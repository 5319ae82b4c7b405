#!/usr/bin/env python3
"""Soak: a bounded mixed load from many connections for minutes, sampling the server's resident
memory and the latency percentiles per interval, then a verdict.

    flock /tmp/hybridkv-bench.lock .venv/bin/python scripts/soak.py --connections 1000 --seconds 300

Every connection runs GET 70% / SET 20% / INCR 5% / DEL 5% over a prefilled key space at a fixed
rate (so latency is measured under a steady offered load, not a saturating one), with durability
`always`. The key space (--keys) is large enough that its records exceed twice the default record
cache, and the prefill writes them and reads them back (a write admits a key to the cache only
while it has room; reads admit, evicting), so the cache is at its budget before the load starts:
resident memory can be flat only then.
Latencies are measured in this Python client and include its scheduling. The verdict fails on
any error, or when resident memory grows over the second half by more than
--rss-growth-mib. p99 is printed per interval; it is judged "stable" when no interval of the
second half is above 3x the median interval. Exit status 1 when the verdict fails.
"""

import argparse
import asyncio
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from conftest import Server, raise_open_files_limit  # noqa: E402

# 300,000 keys of 100 bytes are charged 86.9 MiB by the record cache (printed after the prefill
# by `soak.py --connections 10 --seconds 6 --intervals 2 --cache 1GiB`, 2026-11-24): over twice the
# default 32 MiB --cache, so the cache reaches its budget in the prefill.
KEYS_DEFAULT = 300_000
VALUE_BYTES = 100
# The data tier holds every record and the rewrites between defragmentations; the index region
# every key (the e2e fixture's small defaults, 64 and 16 MiB, are too small for KEYS_DEFAULT).
DATA_BYTES_DEFAULT = "1GiB"
INDEX_BYTES_DEFAULT = "64MiB"
PREFILL_KEYS_PER_CALL = 1000
OPEN_FILES_SPARE = 256
P99_STABLE_FACTOR = 3.0
MIB = 1024 * 1024


@dataclass
class Interval:
    latencies: list = field(default_factory=list)
    errors: int = 0


@dataclass
class IntervalReport:
    seconds: float
    ops: int
    errors: int
    p50_ms: float
    p99_ms: float
    rss_bytes: int
    cache_bytes: int
    threads: int


@dataclass
class SoakResult:
    intervals: list
    rss_start_bytes: int
    error_samples: list

    @property
    def errors(self) -> int:
        return sum(interval.errors for interval in self.intervals)

    @property
    def ops(self) -> int:
        return sum(interval.ops for interval in self.intervals)

    def rss_growth_second_half_bytes(self) -> int:
        half = len(self.intervals) // 2
        return self.intervals[-1].rss_bytes - self.intervals[half - 1 if half else 0].rss_bytes

    def p99_stable(self) -> bool:
        p99s = [interval.p99_ms for interval in self.intervals if interval.ops]
        median = statistics.median(p99s) if p99s else 0.0
        return all(p99 <= P99_STABLE_FACTOR * median for p99 in p99s[len(p99s) // 2 :])


def record_cache_bytes(client) -> int:
    """Bytes held by the namespaces' DRAM record caches (INFO memory), part of the RSS."""
    info = client.info("memory")
    return sum(value for name, value in info.items() if name.endswith("_cache_used_bytes"))


def percentile(sorted_values: list, fraction: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def prefill(server: Server, keys: int) -> int:
    """Writes `keys` keys and reads them back; returns the record cache's bytes afterwards."""
    client = server.client()
    chunks = [range(start, min(keys, start + PREFILL_KEYS_PER_CALL)) for start in range(0, keys, PREFILL_KEYS_PER_CALL)]
    for chunk in chunks:
        client.mset({f"soak:{i}": "v" * VALUE_BYTES for i in chunk})
    # A write admits a key to the record cache only while the cache has room; reads admit,
    # evicting, so reading the keys back brings the cache to its budget.
    for chunk in chunks:
        client.mget([f"soak:{i}" for i in chunk])
    cache_bytes = record_cache_bytes(client)
    client.close()
    return cache_bytes


async def connection_loop(port: int, seed: int, keys: int, rate_per_second: float, deadline: float, current: list, error_samples: list):
    rng = random.Random(seed)
    client = redis.asyncio.Redis(host="127.0.0.1", port=port, single_connection_client=True, socket_timeout=30)
    await asyncio.sleep(rng.uniform(0, 1 / rate_per_second))
    try:
        while time.monotonic() < deadline:
            key = f"soak:{rng.randrange(keys)}"
            choice = rng.random()
            began = time.perf_counter()
            try:
                if choice < 0.70:
                    await client.get(key)
                elif choice < 0.90:
                    await client.set(key, "v" * VALUE_BYTES)
                elif choice < 0.95:
                    await client.incr(f"soak:counter:{rng.randrange(100)}")
                else:
                    await client.delete(key)
                current[0].latencies.append(time.perf_counter() - began)
            except (redis.RedisError, OSError) as error:
                current[0].errors += 1
                if len(error_samples) < 10:
                    error_samples.append(f"{type(error).__name__}: {error}")
            await asyncio.sleep(max(0.0, 1 / rate_per_second - (time.perf_counter() - began)))
    finally:
        await client.aclose()


async def sample_intervals(server: Server, deadline: float, interval_seconds: float, current: list, reports: list, on_report):
    began = time.monotonic()
    info_client = server.client()
    while time.monotonic() < deadline:
        await asyncio.sleep(min(interval_seconds, max(0.0, deadline - time.monotonic())))
        finished, current[0] = current[0], Interval()
        latencies = sorted(finished.latencies)
        report = IntervalReport(
            seconds=time.monotonic() - began,
            ops=len(latencies),
            errors=finished.errors,
            p50_ms=percentile(latencies, 0.50) * 1000,
            p99_ms=percentile(latencies, 0.99) * 1000,
            rss_bytes=server.rss_bytes(),
            cache_bytes=record_cache_bytes(info_client),
            threads=server.status_number("Threads"),
        )
        reports.append(report)
        on_report(report)
    info_client.close()


async def soak_async(server: Server, connections: int, keys: int, seconds: float, interval_seconds: float, rate_per_second: float, seed: int, on_report) -> SoakResult:
    current = [Interval()]
    reports, error_samples = [], []
    rss_start = server.rss_bytes()
    deadline = time.monotonic() + seconds
    loops = [connection_loop(server.port, seed * 1_000_003 + n, keys, rate_per_second, deadline, current, error_samples) for n in range(connections)]
    await asyncio.gather(sample_intervals(server, deadline, interval_seconds, current, reports, on_report), *loops)
    return SoakResult(reports, rss_start, error_samples)


def run_soak(server: Server, connections: int, keys: int, seconds: float, interval_seconds: float, rate_per_second: float, seed: int = 1, on_prefilled=lambda cache_bytes: None, on_report=lambda report: None) -> SoakResult:
    """Prefills the key space, then runs the load; `server` must be started."""
    if not raise_open_files_limit(connections + OPEN_FILES_SPARE):
        raise SystemExit(f"the open files hard limit is below {connections + OPEN_FILES_SPARE}")
    on_prefilled(prefill(server, keys))
    return asyncio.run(soak_async(server, connections, keys, seconds, interval_seconds, rate_per_second, seed, on_report))


def print_row(report: IntervalReport):
    print(f"{report.seconds:>8.1f} {report.ops:>9} {report.errors:>6} {report.p50_ms:>8.2f} {report.p99_ms:>8.2f} {report.rss_bytes / MIB:>9.1f} {report.cache_bytes / MIB:>9.1f} {report.threads:>7}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--intervals", type=int, default=10, help="sampling intervals over the run")
    parser.add_argument("--rate", type=float, default=3, help="commands per second per connection (one Python process drives them all: keep it below what it can send)")
    parser.add_argument("--cache", default="32MiB", help="the server's DRAM record cache: it fills to this budget, and RSS with it, before memory can be flat")
    parser.add_argument("--keys", type=int, default=KEYS_DEFAULT, help="prefilled keys of 100 bytes, read and written uniformly; their records must exceed the cache for it to reach its budget")
    parser.add_argument("--data-bytes", default=DATA_BYTES_DEFAULT)
    parser.add_argument("--index-bytes", default=INDEX_BYTES_DEFAULT)
    parser.add_argument("--index", default="pmem")
    parser.add_argument("--data", default="ssd")
    parser.add_argument("--rss-growth-mib", type=float, default=16, help="largest resident memory growth over the second half that passes")
    parser.add_argument("--server-args", default="", help="more `hybridkv serve` flags, e.g. '--engine-calls inline'")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="hybridkv-soak-"))
    server = Server(workdir / "data", ["--index", args.index, "--data", args.data, "--durability", "always", "--cache", args.cache, "--data-bytes", args.data_bytes, "--index-bytes", args.index_bytes, "--maxclients", str(args.connections + 100), *shlex.split(args.server_args)])
    print(f"soak: {args.connections} connections x {args.rate:g} commands/s for {args.seconds:g} s over {args.keys} keys, index {args.index}, data {args.data}, record cache {args.cache}, durability always {args.server_args}")
    header = f"{'seconds':>8} {'ops':>9} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'RSS MiB':>9} {'cache MiB':>9} {'threads':>7}"
    try:
        server.start()
        result = run_soak(server, args.connections, args.keys, args.seconds, args.seconds / args.intervals, args.rate, args.seed, lambda cache_bytes: print(f"prefilled {args.keys} keys: record cache {cache_bytes / MIB:.1f} MiB\n{header}", flush=True), print_row)
    finally:
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    growth_mib = result.rss_growth_second_half_bytes() / MIB
    print(f"ops {result.ops}, errors {result.errors}, RSS start {result.rss_start_bytes / MIB:.1f} MiB, end {result.intervals[-1].rss_bytes / MIB:.1f} MiB, growth over the second half {growth_mib:+.1f} MiB")
    for sample in result.error_samples:
        print(f"error: {sample}")
    print(f"p99 {'stable' if result.p99_stable() else 'UNSTABLE'} (no second-half interval above {P99_STABLE_FACTOR:g}x the median)")
    passed = result.errors == 0 and growth_mib <= args.rss_growth_mib
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
