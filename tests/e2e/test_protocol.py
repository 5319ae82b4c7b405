"""The wire protocol and its limits, driven through raw sockets: malformed requests get Redis's
error and a closed connection, while the server keeps serving everyone else."""

import socket
import subprocess
import time

import pytest
import redis

from conftest import raw_exchange


def still_serves(server):
    client = server.client()
    assert client.ping() is True
    client.close()


@pytest.mark.parametrize(
    "payload, error",
    [
        (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*2\r\nxyz\r\n", b"-ERR Protocol error: expected '$', got 'x'\r\n"),
        (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n$600000000\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*9999999999\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b'SET "unbalanced\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
        (b"x" * (64 * 1024 + 10), b"-ERR Protocol error: too big inline request\r\n"),
    ],
)
def test_malformed_requests_get_redis_errors_and_close(shared_server, payload, error):
    assert raw_exchange(shared_server.port, payload) == error
    still_serves(shared_server)


def test_malformed_request_after_good_ones_answers_them_first(shared_server):
    reply = raw_exchange(shared_server.port, b"PING\r\n*1\r\n$4\r\nPING\r\n*x\r\n")
    assert reply == b"+PONG\r\n+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"


def test_inline_commands_with_quotes(shared_server):
    reply = raw_exchange(shared_server.port, b'SET inline "hello world"\r\nGET inline\r\nECHO \'it\\\'s\'\r\nQUIT\r\n')
    assert reply == b"+OK\r\n$11\r\nhello world\r\n$4\r\nit's\r\n+OK\r\n"


def test_pipelining_answers_in_order(shared_server):
    commands = b"".join(b"*3\r\n$3\r\nSET\r\n$2\r\np%d\r\n$1\r\n%d\r\n" % (i % 10, i % 10) for i in range(200))
    commands += b"".join(b"*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n" for _ in range(300))
    commands += b"*1\r\n$4\r\nQUIT\r\n"
    reply = raw_exchange(shared_server.port, b"*1\r\n$7\r\nFLUSHDB\r\n" + commands)
    expected = b"+OK\r\n" + b"+OK\r\n" * 200 + b"".join(b":%d\r\n" % n for n in range(1, 301)) + b"+OK\r\n"
    assert reply == expected


def test_pipelining_with_redis_py(r):
    pipe = r.pipeline(transaction=False)
    for i in range(1000):
        pipe.set(f"key:{i}", i)
    for i in range(1000):
        pipe.get(f"key:{i}")
    results = pipe.execute()
    assert results[:1000] == [True] * 1000
    assert results[1000:] == [str(i) for i in range(1000)]


def test_a_pipelined_run_of_reads_answers_as_the_reads_one_at_a_time(r):
    """Runs of pipelined reads have their keys prefetched together before they run one by one;
    the replies, errors included, are those of the same commands sent one at a time."""
    r.set("pr:s", "value")
    r.set("pr:n", 41)
    r.set("pr:ttl", "v", px=600_000)
    r.hset("pr:h", mapping={"f": "1"})
    reads = [("GET", "pr:s"), ("GET", "pr:h"), ("GET", "pr:missing"), ("GET",), ("STRLEN", "pr:s"),
             ("EXISTS", "pr:s", "pr:h", "pr:missing"), ("TYPE", "pr:h"), ("HGET", "pr:h", "f"),
             ("GETRANGE", "pr:s", 1, 3), ("MGET", "pr:s", "pr:h", "pr:n"), ("NOSUCH", "pr:s"),
             ("GET", "k" * 70_000), ("PTTL", "pr:missing"), ("HGETALL", "pr:s"), ("GET", "pr:n")]
    reads = reads * 3
    one_at_a_time = []
    for command in reads:
        try:
            one_at_a_time.append(r.execute_command(*command))
        except redis.ResponseError as error:
            one_at_a_time.append(str(error))
    pipe = r.pipeline(transaction=False)
    for command in reads:
        pipe.execute_command(*command)
    pipelined = [str(reply) if isinstance(reply, redis.ResponseError) else reply for reply in pipe.execute(raise_on_error=False)]
    assert pipelined == one_at_a_time
    assert one_at_a_time[:4] == ["value", "WRONGTYPE Operation against a key holding the wrong kind of value", None,
                                 "wrong number of arguments for 'get' command"]


def test_large_request_arriving_in_pieces(r, shared_server):
    value = b"v" * (1024 * 1024)
    payload = b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n%s\r\n" % (len(value), value)
    with socket.create_connection(("127.0.0.1", shared_server.port)) as connection:
        for start in range(0, len(payload), 70_000):
            connection.sendall(payload[start : start + 70_000])
            time.sleep(0.001)
        assert connection.recv(100) == b"+OK\r\n"
    assert r.strlen("big") == len(value)


def test_client_disconnecting_mid_command_leaves_others_served(r, shared_server):
    for partial in [b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc", b"*2\r\n$3\r\nGE", b"SET half"]:
        connection = socket.create_connection(("127.0.0.1", shared_server.port))
        connection.sendall(partial)
        connection.close()
    time.sleep(0.1)
    assert r.exists("k") == 0
    assert r.set("k", "after") is True
    assert r.get("k") == "after"


def test_too_many_arguments(make_server):
    server = make_server("--proto-max-bulk-len", "1KiB")
    reply = raw_exchange(server.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000\r\n")
    assert reply == b"-ERR Protocol error: invalid bulk length\r\n"
    still_serves(server)


def test_unknown_command(r):
    with pytest.raises(redis.ResponseError, match=r"^unknown command 'FOO', with args beginning with: 'x' $"):
        r.execute_command("FOO", "x")


def test_lcs_refuses_strings_whose_table_would_pass_its_memory_bound(r):
    r.mset({"a": "x" * 5000, "b": "y" * 5000, "small": "xyx"})
    with pytest.raises(redis.ResponseError, match="transient memory for LCS would be 100040004 bytes, over the limit of 67108864"):
        r.execute_command("LCS", "a", "b")
    assert r.execute_command("LCS", "a", "small", "LEN") == 2, "a long string with a short one fits"
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("LCS", "a", "b", "LEN").execute_command("LCS", "small", "small")
    replies = pipe.execute(raise_on_error=False)
    assert isinstance(replies[0], redis.ResponseError) and replies[1] == "xyx"


def test_value_over_the_namespace_limit_is_refused(make_server):
    server = make_server("--value-bytes-max", "64KiB")
    client = server.client()
    with pytest.raises(redis.ResponseError, match="over the limit"):
        client.set("big", "x" * (70 * 1024))
    client.set("small", "x" * 1024)
    with pytest.raises(redis.ResponseError, match="string exceeds maximum allowed size"):
        client.append("small", "y" * (64 * 1024))
    with pytest.raises(redis.ResponseError, match="string exceeds maximum allowed size"):
        client.setrange("small", 100 * 1024, "z")
    with pytest.raises(redis.ResponseError, match="string exceeds maximum allowed size"):
        client.execute_command("BITFIELD", "small", "SET", "u8", "#70000", "1")
    assert client.execute_command("BITFIELD", "small", "GET", "u8", "#70000") == [0], "reading past the end is not growing"
    assert client.strlen("small") == 1024


def test_memory_budget_gives_oom_and_reads_keep_working(make_server):
    server = make_server("--data-bytes", "32MiB", "--index-bytes", "4MiB")
    client = server.client()
    value = "v" * 100_000
    written = 0
    # redis-py maps the "-OOM" error code to OutOfMemoryError.
    with pytest.raises(redis.exceptions.OutOfMemoryError, match="data tier full"):
        for i in range(1000):
            client.set(f"k{i}", value)
            written += 1
    assert written > 0
    assert client.get("k0") == value
    assert client.dbsize() == written


def test_overwrites_beyond_the_data_tier_wait_for_defragmentation_instead_of_failing(make_server, tmp_path):
    # 64 blocks of 1 MiB; 2,000 keys of 1 KB live (about 2 MB), rewritten by redis-benchmark
    # until ten times the tier has been written (about 250 MB/s here, faster than
    # defragmentation frees blocks): replies wait for it while it lags instead of turning into
    # -OOM (before, the first -OOM came within 0.3 s).
    config = tmp_path / "small-tier.toml"
    config.write_text('[[namespace]]\nname = "small"\ndurability = "periodic"\nindex_bytes = "8MiB"\n'
                      'data_bytes = "64MiB"\nwrite_block_bytes = "1MiB"\ncheckpoint_interval_bytes = "4MiB"\n')
    server = make_server("--config", str(config))
    run = subprocess.run(["redis-benchmark", "-p", str(server.port), "-t", "set", "-n", "600000", "-r", "2000",
                          "-d", "1000", "-c", "50", "-P", "16", "--csv"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "OOM" not in run.stdout + run.stderr, run.stdout + run.stderr
    client = server.client()
    persistence = client.info("persistence")
    assert persistence["ns_small_log_bytes_written"] > 9 * 64 * 1024 * 1024
    assert client.dbsize() <= 2000
    client.set("after", "the load")
    assert client.get("after") == "the load"


def test_max_clients(make_server):
    server = make_server("--maxclients", "2")
    first, second = server.client(), server.client()
    assert first.ping() and second.ping()
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as refused:
        assert refused.recv(100) == b"-ERR max number of clients reached\r\n"
        assert refused.recv(100) == b""
    first.close()
    time.sleep(0.1)
    assert server.client().ping()


def test_query_buffer_limit(make_server):
    server = make_server("--client-query-buffer-limit", "64KiB")
    payload = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$200000\r\n" + b"x" * 100_000
    reply = raw_exchange(server.port, payload)
    assert reply.startswith(b"-ERR query buffer exceeds client-query-buffer-limit")
    still_serves(server)


def test_multi_queue_limit(shared_server):
    client = shared_server.client()
    pipe = client.pipeline(transaction=True)
    for i in range(10_001):
        pipe.set(f"q{i}", i)
    with pytest.raises(redis.ResponseError, match="MULTI queue is full"):
        pipe.execute()
    assert client.exists("q0") == 0


def test_pipelined_writes_to_different_keys_share_a_transaction_and_each_answer_as_alone(make_server):
    """Consecutive single-key writes of one client, to any keys, run in one engine transaction;
    each still gets the reply it would get alone, and a write the engine refuses (a value over
    the limit) makes the group run one command at a time."""
    server = make_server("--value-bytes-max", "1KiB", "--durability", "periodic")
    client = server.client()
    client.set("text", "t")
    transactions = lambda: client.info("stats")["engine_writes"]
    before = transactions()
    pipe = client.pipeline(transaction=False)
    pipe.set("c", "1")
    pipe.incr("c")
    pipe.set("d", "x")
    pipe.hset("text", "f", "v")
    pipe.incr("c")
    pipe.hset("h", "g", "w")
    pipe.append("d", "y")
    results = pipe.execute(raise_on_error=False)
    assert results[:3] == [True, 2, True]
    assert isinstance(results[3], redis.ResponseError) and str(results[3]).startswith("WRONGTYPE")
    assert results[4:] == [3, 1, 2]
    assert [client.get("c"), client.get("d"), client.hgetall("h")] == ["3", "xy", {"g": "w"}]
    assert transactions() - before == 1, "the seven writes ran in one transaction"

    before = transactions()
    pipe = client.pipeline(transaction=False)
    pipe.set("a", "1")
    pipe.incr("b")
    pipe.incr("text")
    pipe.hset("h", "f", "v")
    pipe.set("big", "x" * 2000)
    pipe.append("a", "2")
    pipe.incr("b")
    results = pipe.execute(raise_on_error=False)
    assert results[:2] == [True, 1]
    assert str(results[2]) == "value is not an integer or out of range", results[2]
    assert results[3] == 1
    assert isinstance(results[4], redis.ResponseError) and "over the limit" in str(results[4]), results[4]
    assert results[5:] == [2, 2]
    assert [client.get("a"), client.get("b"), client.get("big")] == ["12", "2", None]
    assert client.hgetall("h") == {"g": "w", "f": "v"}
    assert transactions() - before == 5, "the group failed whole, then its writes ran one at a time"


def test_pipelined_writes_to_one_key_each_answer_as_alone(make_server):
    """Consecutive writes of one client to one key run in one engine transaction; each still
    gets the reply it would get alone: a Redis error fails only its command, and a write the
    engine refuses (a value over the limit) makes the group run one command at a time."""
    server = make_server("--value-bytes-max", "64KiB", "--durability", "periodic")
    client = server.client()
    pipe = client.pipeline(transaction=False)
    pipe.set("k", "1")
    pipe.incr("k")
    pipe.hset("k", "f", "v")
    pipe.incr("k")
    pipe.set("big", "a")
    pipe.set("big", "x" * 70_000)
    pipe.append("big", "b")
    pipe.hset("h", "a", "1")
    pipe.hincrby("h", "a", 5)
    pipe.hdel("h", "missing")
    pipe.hset("h", "b", "2")
    results = pipe.execute(raise_on_error=False)
    assert results[:2] == [True, 2]
    assert isinstance(results[2], redis.ResponseError) and str(results[2]).startswith("WRONGTYPE")
    assert results[3:5] == [3, True]
    assert isinstance(results[5], redis.ResponseError), results[5]
    assert results[6:] == [2, 1, 6, 0, 1]
    assert client.get("k") == "3"
    assert client.get("big") == "ab"
    assert client.hgetall("h") == {"a": "6", "b": "2"}
