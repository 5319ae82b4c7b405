"""The soak (scripts/soak.py), shortened: 200 connections of mixed commands for 15 s. No command
may fail and the server's resident memory must not keep growing; the latency percentiles are
printed by the long run (docs/RELIABILITY.md), not asserted here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import soak  # noqa: E402

CONNECTIONS = 200
SECONDS = 15
INTERVAL_SECONDS = 3
RATE_PER_CONNECTION = 10
RSS_GROWTH_SECOND_HALF_BYTES_MAX = 32 * soak.MIB


def test_short_soak_has_no_errors_and_flat_memory(make_server):
    server = make_server("--durability", "always")
    result = soak.run_soak(server, CONNECTIONS, SECONDS, INTERVAL_SECONDS, RATE_PER_CONNECTION)
    assert result.error_samples == [] and result.errors == 0
    assert len(result.intervals) >= SECONDS // INTERVAL_SECONDS
    assert all(interval.ops > 0 for interval in result.intervals)
    assert result.rss_growth_second_half_bytes() < RSS_GROWTH_SECOND_HALF_BYTES_MAX
    assert server.client().ping()
