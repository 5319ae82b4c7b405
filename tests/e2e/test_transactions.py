"""MULTI/EXEC/WATCH semantics, with a second client changing watched keys."""

import threading
import time
from datetime import datetime

import pytest
import redis

from conftest import raw_exchange


def test_exec_applies_queued_commands_in_order(r):
    pipe = r.pipeline(transaction=True)
    pipe.set("a", 1).incr("a").hset("h", "f", "v").hgetall("h").get("missing")
    assert pipe.execute() == [True, 2, 1, {"f": "v"}, None]


def test_runtime_errors_do_not_abort_the_others(r):
    r.set("s", "text")
    pipe = r.pipeline(transaction=True)
    pipe.set("a", "1").incr("s").set("b", "2")
    results = pipe.execute(raise_on_error=False)
    assert results[0] is True and results[2] is True
    assert isinstance(results[1], redis.ResponseError)
    assert r.mget("a", "b") == ["1", "2"]


def test_queue_error_discards_everything(r):
    r.execute_command("MULTI")
    r.execute_command("SET", "x", "1")  # redis-py turns the +QUEUED reply of SET into False
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        r.execute_command("SET", "y")
    with pytest.raises(redis.ResponseError, match="^Transaction discarded because of previous errors"):
        r.execute_command("EXEC")
    assert r.exists("x") == 0


def test_a_refused_exec_discards_the_transaction_as_redis(pair):
    payload = b"EXEC x\r\nMULTI\r\nSET k 1\r\nEXEC x\r\nEXEC\r\nGET k\r\n"
    ours, theirs = (raw_exchange(client.connection_pool.connection_kwargs["port"], payload, read_timeout=0.5) for client in pair)
    assert ours == theirs
    assert b"-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command" in ours


def test_key_listings_inside_multi_see_the_transactions_own_writes(r):
    r.mset({"a": "1", "b": "2"})
    with r.pipeline(transaction=True) as pipe:
        pipe.set("c", "3").delete("a").keys("*").scan(0, count=1000).dbsize().randomkey()
        _, _, keys, (cursor, scanned), size, some_key = pipe.execute()
    assert sorted(keys) == ["b", "c"] and sorted(scanned) == ["b", "c"] and cursor == 0
    assert size == 2 and some_key in ("b", "c")


def test_session_and_server_commands_are_queued_and_run_after_the_transaction(r):
    """INFO, CONFIG, CLIENT, COMMAND and LASTSAVE are queued as Redis queues them; EXEC runs them
    once its writes have committed, outside the partition locks (here beside KEYS, whose EXEC
    holds every partition), and their replies keep their places."""
    r.execute_command("CLIENT", "SETNAME", "before")
    with r.pipeline(transaction=True) as pipe:
        pipe.set("a", "1").execute_command("CLIENT", "SETNAME", "inside").execute_command("CLIENT", "GETNAME")
        pipe.keys("*").info("keyspace").config_get("maxclients").command_count()
        pipe.execute_command("LASTSAVE").get("a")
        replies = pipe.execute()
    stored, renamed, name, keys, keyspace, config, count, last_save, value = replies
    assert stored is True and renamed == "OK" and name == "inside" and keys == ["a"]
    assert keyspace["db0"]["keys"] == 1, "INFO runs after the transaction's writes"
    assert config == {"maxclients": "10000"} and count > 50 and isinstance(last_save, datetime) and value == "1"
    assert r.execute_command("CLIENT", "GETNAME") == "inside"
    for refused in (["FLUSHALL"], ["SAVE"], ["SHUTDOWN"], ["BGSAVE"], ["BGREWRITEAOF"], ["MOVE", "a", "1"], ["SWAPDB", "0", "1"]):
        r.execute_command("MULTI")
        with pytest.raises(redis.ResponseError, match="^Command not allowed inside a transaction"):
            r.execute_command(*refused)
        r.execute_command("DISCARD")


def test_flushdb_inside_multi_deletes_in_the_transaction_or_refuses_a_database_too_big_for_it(make_server, tmp_path):
    config = tmp_path / "small-blocks.toml"
    config.write_text('[[namespace]]\nwrite_block_bytes = "64KiB"\nvalue_bytes_max = "16KiB"\nindex_bytes = "16MiB"\ndata_bytes = "64MiB"\n')
    server = make_server("--config", str(config))
    client = server.client()
    client.set("before", "x")
    client.set("gone", "y", px=1)
    time.sleep(0.01)
    with client.pipeline(transaction=True) as pipe:
        assert pipe.set("a", "1").flushdb().set("b", "2").dbsize().execute() == [True, True, True, 1]
    assert client.keys("*") == ["b"] and client.dbsize() == 1, "expired keys go too"
    for first in range(0, 3000, 500):
        client.mset({f"key:{number:05}": "v" for number in range(first, first + 500)})
    with client.pipeline(transaction=True) as pipe:
        pipe.flushdb().set("c", "3")
        with pytest.raises(redis.ResponseError, match="does not fit in one write block of 65472 bytes \\(transaction not executed\\)"):
            pipe.execute()
    assert client.dbsize() == 3001 and client.get("c") is None, "nothing done"
    assert client.flushdb() and client.dbsize() == 0, "outside MULTI, in as many batches as it takes"


def test_select_inside_multi_moves_the_commands_after_it_and_the_session_when_exec_runs(shared_server):
    """As Redis: a SELECT queued in MULTI runs in EXEC, so the commands queued after it, and the
    connection after EXEC, use its database; a SELECT that fails answers its error there and the
    database stays. EXEC's one batch covers one database: key commands in two are refused whole."""
    client = shared_server.client(single_connection_client=True)
    client.flushall()
    client.set("here", "db0")
    client.execute_command("MULTI")
    for command in (["SELECT", "4"], ["SET", "a", "1"], ["SELECT", "x"], ["SELECT", "99"], ["INCR", "a"], ["DBSIZE"], ["CLIENT", "INFO"]):
        assert client.execute_command(*command) in ("QUEUED", False)
    ok, set_a, not_integer, out_of_range, incremented, size, info = client.execute_command("EXEC")
    assert (ok, set_a, incremented, size) == ("OK", "OK", 2, 1)
    assert str(not_integer) == "value is not an integer or out of range" and str(out_of_range) == "DB index is out of range"
    assert " db=4 " in info, "a session command runs in the database it was queued for"
    assert client.get("a") == "2" and client.get("here") is None, "the session is on database 4 after EXEC"
    assert client.client_info()["db"] == 4

    # DISCARD, or an EXEC that does not run, leaves the database as it was.
    client.execute_command("MULTI")
    client.execute_command("SELECT", "0")
    client.execute_command("DISCARD")
    assert client.get("a") == "2"
    client.execute_command("MULTI")
    for command in (["SET", "b", "1"], ["SELECT", "0"], ["SET", "c", "1"]):
        client.execute_command(*command)
    with pytest.raises(redis.ResponseError, match="keys of one database only.*transaction not executed"):
        client.execute_command("EXEC")
    assert client.get("a") == "2" and client.exists("b", "c") == 0
    client.execute_command("SELECT", "0")
    assert client.exists("b", "c") == 0 and client.get("here") == "db0"

    # A SELECT first: every key command runs in database 5, watched keys there are compared.
    other = shared_server.client(db=5)
    client.execute_command("WATCH", "w")
    other.set("w", "changed")
    client.execute_command("MULTI")
    client.execute_command("SELECT", "5")
    client.execute_command("SET", "w", "mine")
    assert client.execute_command("EXEC") == ["OK", "OK"], "the w watched in database 0 did not change"
    assert other.get("w") == "mine"
    client.execute_command("SELECT", "5")
    client.execute_command("WATCH", "w")
    client.execute_command("SELECT", "0")
    other.set("w", "changed again")
    client.execute_command("MULTI")
    client.execute_command("SELECT", "5")
    client.execute_command("SET", "w", "mine")
    assert client.execute_command("EXEC") is None, "the watched key of database 5 changed"
    assert other.get("w") == "changed again"
    client.execute_command("SELECT", "0")
    client.execute_command("MULTI")
    for command in (["PING"], ["SELECT", "5"], ["SET", "w", "mine"], ["COPY", "w", "copied", "DB", "5"]):
        client.execute_command(*command)
    assert client.execute_command("EXEC") == ["PONG", "OK", "OK", 1], "PING touches no key; COPY stays in database 5"
    assert other.mget("w", "copied") == ["mine", "mine"]
    client.close()
    other.close()


def test_copy_to_another_database_inside_multi_is_refused_in_exec_and_the_rest_runs(r):
    r.set("a", "1")
    with r.pipeline(transaction=True) as pipe:
        replies = pipe.copy("a", "b", destination_db=1).copy("a", "c").get("c").execute(raise_on_error=False)
    assert isinstance(replies[0], redis.ResponseError) and "not supported inside MULTI" in str(replies[0]), replies
    assert replies[1:] == [True, "1"]


def test_a_watched_key_absent_at_watch_and_at_exec_still_aborts_exec_if_written_between(r, shared_server):
    """Created and deleted again by another client: the key has no version either time, so only
    the write's touch tells EXEC (crate::watch)."""
    other = shared_server.client()
    r.execute_command("WATCH", "absent")
    other.set("absent", "briefly")
    other.delete("absent")
    r.execute_command("MULTI")
    r.execute_command("SET", "result", "ran")
    assert r.execute_command("EXEC") is None
    assert r.exists("result") == 0
    r.execute_command("WATCH", "absent")
    other.set("absent", "1", xx=True)
    other.delete("absent")
    other.hdel("absent", "field")
    r.execute_command("MULTI")
    r.execute_command("SET", "result", "ran")
    assert r.execute_command("EXEC") == ["OK"], "writes that change nothing do not abort EXEC"


def test_a_connection_watches_a_bounded_number_of_keys(r):
    limit = 10_000
    r.execute_command("WATCH", *[f"w{number}" for number in range(limit - 1)])
    with pytest.raises(redis.ResponseError, match=f"^this connection watches {limit - 1} keys and may watch at most {limit}"):
        r.execute_command("WATCH", "a", "b")
    r.execute_command("WATCH", "a")
    r.execute_command("MULTI")
    r.execute_command("SET", "a", "1")
    assert r.execute_command("EXEC") == ["OK"], "the refused WATCH watched none of its keys"
    r.execute_command("WATCH", *[f"w{number}" for number in range(limit)])
    r.execute_command("UNWATCH")
    r.execute_command("WATCH", "a")


def test_a_session_command_is_not_run_when_a_watched_key_changed(r, shared_server):
    r.execute_command("CLIENT", "SETNAME", "unchanged")
    r.execute_command("WATCH", "w")
    shared_server.client().set("w", "changed by another client")
    r.execute_command("MULTI")
    r.execute_command("CLIENT", "SETNAME", "changed")
    assert r.execute_command("EXEC") is None
    assert r.execute_command("CLIENT", "GETNAME") == "unchanged"


def test_key_listings_in_transactions_run_beside_writers(shared_server):
    """An EXEC that lists keys holds every partition: writers on other connections wait for it
    and go on, and each listing is a consistent snapshot (the writers' pairs are whole)."""
    stop = threading.Event()
    errors = []

    def write_pairs(name):
        client = shared_server.client()
        number = 0
        while not stop.is_set():
            try:
                client.mset({f"{name}:{number}:x": "1", f"{name}:{number}:y": "1"})
            except redis.RedisError as error:
                errors.append(error)
                return
            number += 1

    client = shared_server.client()
    client.flushall()
    writers = [threading.Thread(target=write_pairs, args=(f"w{index}",)) for index in range(3)]
    for writer in writers:
        writer.start()
    try:
        for round_number in range(30):
            with client.pipeline(transaction=True) as pipe:
                pipe.set(f"mine:{round_number}", "1").keys("*")
                _, keys = pipe.execute()
            assert f"mine:{round_number}" in keys
            pairs = {key.rsplit(":", 1)[0] for key in keys if not key.startswith("mine:")}
            assert all(f"{pair}:x" in keys and f"{pair}:y" in keys for pair in pairs), "an MSET seen half done"
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=30)
    assert not errors
    assert not any(writer.is_alive() for writer in writers)


def test_watch_aborts_when_another_client_writes(r, shared_server):
    other = shared_server.client()
    r.set("balance", 100)
    with r.pipeline(transaction=True) as pipe:
        pipe.watch("balance")
        current = int(pipe.get("balance"))
        other.set("balance", 500)
        pipe.multi()
        pipe.set("balance", current - 10)
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.get("balance") == "500"


def test_watch_aborts_when_watched_key_is_created_or_deleted(r, shared_server):
    other = shared_server.client()
    for change in (lambda: other.set("w", 1), lambda: other.delete("w")):
        with r.pipeline(transaction=True) as pipe:
            pipe.watch("w")
            change()
            pipe.multi()
            pipe.set("result", "written")
            with pytest.raises(redis.WatchError):
                pipe.execute()
    assert r.exists("result") == 0


def test_watch_passes_when_nothing_changed_and_unwatch_forgets(r, shared_server):
    other = shared_server.client()
    r.set("k", 1)
    with r.pipeline(transaction=True) as pipe:
        pipe.watch("k")
        pipe.multi()
        pipe.incr("k")
        assert pipe.execute() == [2]
    r.execute_command("WATCH", "k")
    other.set("k", 10)
    r.execute_command("UNWATCH")
    r.execute_command("MULTI")
    r.execute_command("INCR", "k")
    assert r.execute_command("EXEC") == [11]


def test_exec_is_atomic_against_concurrent_increments(r, shared_server):
    """Each EXEC moves 1 from a to b; concurrent readers never see a + b differ from the total."""
    r.mset({"a": 1000, "b": 0})
    stop = threading.Event()
    torn = []

    def reader():
        client = shared_server.client()
        while not stop.is_set():
            pipe = client.pipeline(transaction=True)
            pipe.get("a").get("b")
            a, b = pipe.execute()
            if int(a) + int(b) != 1000:
                torn.append((a, b))

    thread = threading.Thread(target=reader)
    thread.start()
    for _ in range(200):
        pipe = r.pipeline(transaction=True)
        pipe.decr("a").incr("b")
        pipe.execute()
    stop.set()
    thread.join()
    assert not torn
    assert r.mget("a", "b") == ["800", "200"]


def test_nested_multi_and_exec_without_multi(r):
    r.execute_command("MULTI")
    with pytest.raises(redis.ResponseError, match="MULTI calls can not be nested"):
        r.execute_command("MULTI")
    with pytest.raises(redis.ResponseError, match="WATCH inside MULTI is not allowed"):
        r.execute_command("WATCH", "x")
    assert r.execute_command("EXEC") == []
    with pytest.raises(redis.ResponseError, match="EXEC without MULTI"):
        r.execute_command("EXEC")
