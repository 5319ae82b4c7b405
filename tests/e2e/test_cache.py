"""The record cache through the server: --cache sets its budget, INFO reports it, MEMORY PURGE
empties it (for COLD runs), and values read after a purge are still right."""

import pytest
import redis


def info_cache(client) -> dict:
    memory = client.info("memory")
    return {key.removeprefix("ns_default_cache_"): value for key, value in memory.items() if key.startswith("ns_default_cache_")}


def test_cache_budget_statistics_and_purge(make_server):
    server = make_server("--cache", "1MiB", "--durability", "periodic")
    client = server.client()
    value = "v" * 440
    for number in range(4000):  # about 2 MiB of records: twice the cache
        client.set(f"key:{number}", value)
    for _ in range(3):
        for number in range(100):
            assert client.get(f"key:{number}") == value
    stats = info_cache(client)
    assert stats["capacity_bytes"] == 1024 * 1024
    assert 0 < stats["used_bytes"] <= stats["capacity_bytes"]
    assert stats["hits"] > 0 and stats["evictions"] > 0
    assert client.execute_command("MEMORY", "PURGE") in (True, "OK")
    assert info_cache(client)["used_bytes"] == 0
    misses_before = info_cache(client)["misses"]
    assert client.get("key:7") == value
    assert info_cache(client)["misses"] == misses_before + 1


def test_memory_subcommand_errors(make_server):
    client = make_server().client()
    with pytest.raises(redis.ResponseError, match="unknown subcommand 'DOCTOR'. Try MEMORY HELP."):
        client.execute_command("MEMORY", "DOCTOR")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        client.execute_command("MEMORY")


def test_cache_flag_rejects_a_bad_size(tmp_path):
    import subprocess
    from conftest import BINARY

    result = subprocess.run([str(BINARY), "serve", "--dir", str(tmp_path / "d"), "--cache", "lots"], capture_output=True, timeout=20)
    assert result.returncode != 0
    assert b"cache" in result.stderr
