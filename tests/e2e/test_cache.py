"""The record cache through the server: --cache sets its budget, INFO reports it, MEMORY PURGE
empties it (for COLD runs), and values read after a purge are still right."""

import threading

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
    # Writes fill the cache only while it has room; reading every key admits the rest, evicting.
    assert info_cache(client)["evictions"] == 0
    assert client.mget([f"key:{number}" for number in range(4000)]) == [value] * 4000
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


def test_pmem_on_the_msync_fallback_runs_without_a_cache_and_says_so(make_server):
    """ext4 here has no DAX: pmem records are page-cache memory, so a record cache would only copy them."""
    server = make_server("--data", "pmem", "--cache", "1MiB", "--durability", "periodic")
    client = server.client()
    client.set("key", "value")
    assert client.get("key") == "value"
    memory = client.info("memory")
    assert memory["ns_default_cache"].startswith("off (pmem on the msync fallback"), memory
    assert "ns_default_cache_capacity_bytes" not in memory
    assert "msync" in str(client.info("persistence"))


def test_pipelined_commands_on_uncached_records_read_them_ahead_and_answer_right(make_server):
    """Reads of records on ssd that the cache lost are loaded (through the device read queue, or
    on a blocking thread) before the batch runs; every kind of command that reads a value still
    answers as if read directly."""
    server = make_server("--cache", "1MiB", "--durability", "periodic")
    client = server.client()
    for number in range(200):
        client.set(f"key:{number}", f"value-{number}")
        client.set(f"count:{number}", number)
    client.hset("hash", mapping={"a": "1", "b": "2"})
    assert client.execute_command("MEMORY", "PURGE") in (True, "OK")
    misses_before = info_cache(client)["misses"]
    pipe = client.pipeline(transaction=False)
    for number in range(0, 200, 10):
        pipe.get(f"key:{number}")
        pipe.incr(f"count:{number}")
    pipe.mget("key:1", "missing", "key:2")
    pipe.hget("hash", "b")
    pipe.delete("key:3", "missing")
    pipe.getdel("key:4")
    pipe.set("key:5", "new")
    pipe.get("key:5")
    replies = pipe.execute()
    expected = []
    for number in range(0, 200, 10):
        expected += [f"value-{number}", number + 1]
    expected += [["value-1", None, "value-2"], "2", 1, "value-4", True, "new"]
    assert replies == expected
    assert info_cache(client)["misses"] > misses_before


def test_concurrent_misses_of_short_and_long_records_answer_right(make_server):
    """Many clients miss the cache at once, on records shorter and longer than 64 KiB (the longer
    ones take two device reads), while a writer rewrites some of the keys; one MGET needs more
    reads than the device read queue takes at once (512) and is loaded on threads instead."""
    server = make_server("--cache", "2MiB", "--durability", "periodic")
    client = server.client()
    long_value = lambda number, version: f"{version}:{number}:".ljust(100 * 1024, "L")
    short_value = lambda number: f"short-{number}".ljust(300, "s")
    for number in range(40):
        client.set(f"long:{number}", long_value(number, 0))
    for number in range(2000):
        client.set(f"short:{number}", short_value(number))
    assert client.execute_command("MEMORY", "PURGE") in (True, "OK")
    misses_before = info_cache(client)["misses"]

    errors = []
    stop = threading.Event()

    def rewrite_long_values():
        version = 0
        while not stop.is_set():
            version += 1
            for number in range(0, 40, 4):
                client.set(f"long:{number}", long_value(number, version))

    def read(worker: int):
        reader = server.client()
        try:
            for round_number in range(30):
                number = (worker * 7 + round_number) % 40
                got = reader.get(f"long:{number}")
                # A rewritten key answers one of its versions, whole; the others their first.
                version = int(got.split(":", 1)[0]) if number % 4 == 0 else 0
                if got != long_value(number, version):
                    errors.append(f"long:{number}: {got[:40]!r}")
                keys = [f"short:{(worker * 97 + round_number * 13 + offset) % 2000}" for offset in range(8)]
                if reader.mget(keys) != [short_value(int(key.split(":")[1])) for key in keys]:
                    errors.append(f"mget {keys}")
        except Exception as error:  # a reply error or a dropped connection fails the test below
            errors.append(repr(error))

    writer = threading.Thread(target=rewrite_long_values)
    writer.start()
    readers = [threading.Thread(target=read, args=(worker,)) for worker in range(24)]
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join()
    stop.set()
    writer.join()
    assert errors == []

    assert client.execute_command("MEMORY", "PURGE") in (True, "OK")
    keys = [f"short:{number}" for number in range(600)]
    assert client.mget(keys) == [short_value(number) for number in range(600)]
    assert info_cache(client)["misses"] > misses_before + 600
    # The misses went through the device read queue (io_uring works on the machines we test
    # on), several to a submission when they came together.
    memory = client.info("memory")
    assert memory["ns_default_device_reads"] >= memory["ns_default_device_read_submissions"] > 0


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
