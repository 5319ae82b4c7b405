"""kill -9 under a write load with durability `always`, then restart: every write a client saw
acknowledged is there, for each placement of index and records."""

import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import PLACEMENT_IDS, PLACEMENTS

WRITERS = 4
LOAD_SECONDS = 1.5
VALUE_BYTES = 440


def writer(server, number, acknowledged, stop):
    """SETs, INCRs and two-key EXECs until the server dies; records what was acknowledged."""
    client = server.client(socket_timeout=5)
    record = acknowledged[number]
    i = 0
    try:
        while not stop.is_set():
            key = f"w{number}:{i}"
            client.set(key, f"{i}:" + "x" * VALUE_BYTES)
            record["sets"].append(key)
            record["counter"] = client.incr(f"counter:{number}")
            pipe = client.pipeline(transaction=True)
            pipe.set(f"tx{number}:{i}:a", i).set(f"tx{number}:{i}:b", i)
            pipe.execute()
            record["transactions"].append(i)
            i += 1
    except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError):
        pass  # the server was killed under us


@pytest.mark.parametrize("index, data", PLACEMENTS, ids=PLACEMENT_IDS)
def test_acknowledged_writes_survive_kill_9(make_server, index, data):
    server = make_server("--index", index, "--data", data, "--durability", "always")
    acknowledged = [{"sets": [], "counter": 0, "transactions": []} for _ in range(WRITERS)]
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(server, n, acknowledged, stop)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    time.sleep(LOAD_SECONDS)
    server.kill9()
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    assert sum(len(record["sets"]) for record in acknowledged) > 50, "the load did not get going"

    server.start()
    client = server.client()
    for number, record in enumerate(acknowledged):
        values = client.mget(record["sets"]) if record["sets"] else []
        lost = [key for key, value in zip(record["sets"], values) if value is None]
        assert not lost, f"{len(lost)} acknowledged SETs lost, e.g. {lost[:3]}"
        for key, value in zip(record["sets"], values):
            assert value == key.split(":")[1] + ":" + "x" * VALUE_BYTES
        # The INCR sent after the last acknowledged one may or may not have been applied.
        assert int(client.get(f"counter:{number}") or 0) in (record["counter"], record["counter"] + 1)
        for i in record["transactions"]:
            assert client.mget(f"tx{number}:{i}:a", f"tx{number}:{i}:b") == [str(i), str(i)]
        # A transaction never survives half-applied.
        after = len(record["transactions"])
        assert client.exists(f"tx{number}:{after}:a") == client.exists(f"tx{number}:{after}:b")


def mover(server, source, target, stop):
    """MOVEs the key `moving` from `source` to `target` until the server dies."""
    # No retries: redis-py would try a dead server again for seconds.
    client = server.client(db=source, socket_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        while not stop.is_set():
            client.move("moving", target)
    except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError):
        pass  # the server was killed under us


def swapper(server, attempted, acknowledged, stop):
    """SWAPDB 0 1 until the server dies: counts the swaps sent and those answered OK."""
    client = server.client(socket_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        while not stop.is_set():
            attempted.append(1)
            assert client.swapdb(0, 1) is True
            acknowledged.append(1)
    except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError):
        pass


def test_swapped_databases_stay_swapped_after_a_clean_restart_and_after_kill_9_during_swaps(make_server):
    """The numbering is durable before SWAPDB answers (docs/design/formats.md, "Database
    numbering"): after a crash each database holds what the acknowledged swaps, or the one in
    flight, gave it; a client already in a database sees the other's keys at once."""
    server = make_server("--durability", "none")
    zero, one = server.client(), server.client(db=1)
    zero.set("which", "zero")
    one.set("which", "one")
    assert zero.swapdb(0, 1) is True
    assert (zero.get("which"), one.get("which")) == ("one", "zero"), "sessions keep their numbers"
    server.restart()
    assert [server.client(db=number).get("which") for number in (0, 1)] == ["one", "zero"]
    for _ in range(3):
        before = server.client().get("which")
        attempted, acknowledged, stop = [], [], threading.Event()
        thread = threading.Thread(target=swapper, args=(server, attempted, acknowledged, stop))
        thread.start()
        time.sleep(0.3)
        server.kill9()
        stop.set()
        thread.join(timeout=10)
        server.start()
        values = [server.client(db=number).get("which") for number in (0, 1)]
        assert sorted(values) == ["one", "zero"], values
        swapped_parities = {len(acknowledged) % 2, len(attempted) % 2}
        assert (values[0] != before) in {parity == 1 for parity in swapped_parities}, (values, before, len(acknowledged), len(attempted))
        assert len(acknowledged) > 10


@pytest.mark.parametrize("durability", ["always", "periodic"])
def test_a_key_moved_back_and_forth_survives_kill_9_in_one_database_at_least(make_server, durability):
    """MOVE deletes the original only once the copy is durable (docs/design/server.md,
    "Databases"), whatever the durability mode: a crash may leave the key in both, never in neither."""
    server = make_server("--durability", durability)
    server.client().set("moving", "the value")
    server.client().save()
    for _ in range(3):
        stop = threading.Event()
        threads = [threading.Thread(target=mover, args=(server, source, 1 - source, stop)) for source in (0, 1)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        server.kill9()
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        server.start()
        values = [server.client(db=number).get("moving") for number in (0, 1)]
        assert "the value" in values and set(values) <= {"the value", None}, values
