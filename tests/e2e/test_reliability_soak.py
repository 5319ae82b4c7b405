"""The soak (scripts/soak.py), shortened: 200 connections of mixed commands for 15 s over a key
space whose records exceed twice the record cache, so the cache is at its budget throughout. No
command may fail and the server's resident memory must not keep growing (for which the server's
heap gives memory back only in whole huge pages, or runs without them); the latency percentiles
are printed by the long run (docs/RELIABILITY.md), not asserted here."""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import soak  # noqa: E402
from conftest import BINARY  # noqa: E402

CONNECTIONS = 200
SECONDS = 15
INTERVAL_SECONDS = 3
RATE_PER_CONNECTION = 10
CACHE = "8MiB"
CACHE_BYTES = 8 * soak.MIB
# 300,000 keys are charged 86.9 MiB by the cache (scripts/soak.py): a fifth of them, about 17 MiB,
# is over twice CACHE_BYTES.
KEYS = 60_000
# The cache's INFO figure counts charged bytes up to the budget. A full cache may stay below it by
# what doubling a shard's entry map would cost when holding fewer entries in a sparser map would
# not pay (docs/design/cache.md, "Keeping the structures dense"): at 8 MiB, two shards whose maps
# would grow by about 0.5 MB each.
CACHE_FULL_FRACTION = 0.85
RSS_GROWTH_SECOND_HALF_BYTES_MAX = 32 * soak.MIB


def test_short_soak_with_a_full_cache_has_no_errors_and_flat_memory(make_server):
    server = make_server("--durability", "always", "--cache", CACHE)
    prefilled_cache_bytes = []
    result = soak.run_soak(server, CONNECTIONS, KEYS, SECONDS, INTERVAL_SECONDS, RATE_PER_CONNECTION, on_prefilled=prefilled_cache_bytes.append)
    assert prefilled_cache_bytes[0] >= CACHE_FULL_FRACTION * CACHE_BYTES
    evictions = sum(value for name, value in server.client().info("memory").items() if name.endswith("_cache_evictions"))
    assert evictions > 0, "the cache was at its capacity and evicting"
    assert result.error_samples == [] and result.errors == 0
    assert len(result.intervals) >= SECONDS // INTERVAL_SECONDS
    assert all(interval.ops > 0 for interval in result.intervals)
    assert all(interval.cache_bytes >= CACHE_FULL_FRACTION * CACHE_BYTES for interval in result.intervals)
    assert result.rss_growth_second_half_bytes() < RSS_GROWTH_SECOND_HALF_BYTES_MAX
    assert server.client().ping()


def test_transparent_huge_pages_follow_the_flag(make_server):
    """On by default, with the heap giving memory back in whole huge pages (so that khugepaged has
    no holes to fill, docs/design/server.md, "Huge pages"); off turns them off for the process.
    INFO reports what the kernel says; any other value is refused at start. Where the system's
    setting is `never`, on falls back to off and says why."""
    system_never = "[never]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    default = make_server()
    assert default.status_number("THP_enabled") == (0 if system_never else 1)
    assert default.client().info("memory")["transparent_huge_pages"] == ("off" if system_never else "on")
    assert ("is set to never" if system_never else "gives memory back in whole huge pages") in default.log()
    off = make_server("--huge-pages", "off")
    assert off.status_number("THP_enabled") == 0
    assert off.client().info("memory")["transparent_huge_pages"] == "off"
    refused = subprocess.run([str(BINARY), "serve", "--huge-pages", "sometimes"], capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    assert "invalid value 'sometimes' for '--huge-pages" in refused.stderr
