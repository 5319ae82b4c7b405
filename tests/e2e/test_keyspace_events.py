"""Keyspace notifications (notify-keyspace-events): the events every write command publishes,
compared with redis-server's; `expired` from the background sweep; events of an aborted
transaction never published; the configuration text as Redis reads and prints it."""

import time

import pytest
import redis

from conftest import RawClient

# Writes in an order where each one's events are known to Redis (nothing here expires while it
# runs: the `expired` event comes from Redis's and hybridkv's background sweeps, tested apart).
COMMANDS = [
    ["SET", "k", "v"], ["SET", "k", "v", "NX"], ["SET", "k", "v2", "XX", "EX", "100"], ["SET", "k", "v", "GET"],
    ["SET", "k", "v", "KEEPTTL"], ["SETNX", "n", "1"], ["SETNX", "n", "1"], ["SETEX", "s", "10", "v"],
    ["PSETEX", "p", "100000", "v"], ["MSET", "a", "1", "b", "2"], ["MSETNX", "a", "1", "c", "3"], ["MSETNX", "d", "1", "e", "2"],
    ["GETSET", "a", "5"], ["GETDEL", "a"], ["GETDEL", "a"], ["GETEX", "b", "EX", "100"], ["GETEX", "b", "PERSIST"],
    ["GETEX", "b"], ["GETEX", "b", "EX", "0"], ["GETEX", "b", "PXAT", "1"], ["APPEND", "ap", "x"], ["APPEND", "ap", "y"],
    ["SETRANGE", "ap", "5", "z"], ["SETRANGE", "ap2", "0", ""], ["SETRANGE", "ap", "0", ""], ["INCR", "i"], ["DECR", "i"],
    ["INCRBY", "i", "5"], ["DECRBY", "i", "2"], ["INCRBYFLOAT", "f", "1.5"], ["INCR", "k"], ["DEL", "k", "zz", "n"],
    ["UNLINK", "s"], ["SET", "e1", "v"], ["EXPIRE", "e1", "100"], ["EXPIRE", "e1", "100", "NX"], ["PEXPIRE", "e1", "100000"],
    ["EXPIREAT", "e1", "99999999999"], ["PEXPIREAT", "e1", "99999999999000"], ["PERSIST", "e1"], ["PERSIST", "e1"],
    ["EXPIRE", "e1", "-1"], ["SET", "e2", "v"], ["PEXPIREAT", "e2", "1"], ["SET", "r1", "v"], ["RENAME", "r1", "r2"],
    ["SET", "r3", "x"], ["RENAME", "r2", "r3"], ["RENAMENX", "r3", "r4"], ["RENAMENX", "r4", "r4"], ["RENAME", "r4", "r4"],
    ["HSET", "h", "a", "1", "b", "2"], ["HSET", "h", "a", "1"], ["HMSET", "h", "c", "3"], ["HSETNX", "h", "a", "1"],
    ["HSETNX", "h", "z", "1"], ["HDEL", "h", "a", "zz"], ["HDEL", "h", "zz"], ["HINCRBY", "h", "n", "1"],
    ["HINCRBYFLOAT", "h", "f", "1.5"], ["HINCRBY", "h", "n", "x"], ["HDEL", "h", "b", "c", "z", "n", "f"],
    ["SETBIT", "bits", "7", "1"], ["SETBIT", "bits", "7", "1"], ["BITOP", "AND", "dest", "bits"], ["BITOP", "AND", "dest", "none1"],
    ["BITOP", "AND", "dest", "none1"], ["BITFIELD", "bf", "SET", "u8", "0", "1"], ["BITFIELD", "bf", "GET", "u8", "0"],
    ["BITFIELD", "bf", "INCRBY", "u8", "0", "1"], ["BITFIELD", "bf", "OVERFLOW", "FAIL", "INCRBY", "u2", "0", "100"],
    ["SET", "cp", "v"], ["COPY", "cp", "cp2"], ["COPY", "cp", "cp2"], ["COPY", "cp", "cp2", "REPLACE"], ["COPY", "cp", "cp3", "DB", "2"],
    ["MOVE", "cp2", "1"], ["SET", "mv", "x"], ["MOVE", "mv", "1"], ["MOVE", "mv", "1"], ["HSET", "h2", "f", "v"],
    ["DUMP-RESTORE", "cp", "rs"], ["DUMP-RESTORE", "cp", "rs", "REPLACE"], ["DUMP-RESTORE", "h2", "rs2"],
    ["SADD", "s1", "a", "b", "c"], ["SADD", "s1", "a"], ["SREM", "s1", "zz"], ["SREM", "s1", "a"], ["SADD", "s2", "b", "x"],
    ["SMOVE", "s1", "s2", "b"], ["SMOVE", "s1", "s2", "c"], ["SMOVE", "s2", "s2", "x"], ["SMOVE", "s2", "s3", "zz"],
    ["SINTERSTORE", "s4", "s2", "s2"], ["SUNIONSTORE", "s4", "s2", "none1"], ["SDIFFSTORE", "s4", "s2", "s2"],
    ["SDIFFSTORE", "s4", "s2", "s2"], ["SINTERSTORE", "s5", "s2", "none1"], ["SPOP", "none1"], ["SPOP", "s2", "0"],
    ["SPOP", "s2", "1"], ["SADD", "s6", "a", "b"], ["SPOP", "s6", "5"], ["SADD", "s7", "a"], ["SPOP", "s7"],
    ["DUMP-RESTORE", "s2", "rs3"],
    ["RPUSH", "l1", "a", "b", "c", "d"], ["LPUSH", "l1", "z"], ["LPUSHX", "none1", "a"], ["RPUSHX", "l1", "e"], ["LPOP", "l1"],
    ["RPOP", "l1", "2"], ["LSET", "l1", "0", "A"], ["LINSERT", "l1", "AFTER", "A", "B"], ["LINSERT", "l1", "AFTER", "zz", "B"],
    ["LREM", "l1", "0", "zz"], ["LREM", "l1", "1", "B"], ["LTRIM", "l1", "0", "-1"], ["LMOVE", "l1", "l2", "LEFT", "RIGHT"],
    ["LMOVE", "l2", "l2", "LEFT", "RIGHT"], ["RPOPLPUSH", "l2", "l3"], ["LMPOP", "2", "none1", "l1", "LEFT", "COUNT", "5"],
    ["RPUSH", "l4", "x", "y"], ["LTRIM", "l4", "5", "6"], ["RPUSH", "l5", "x"], ["LREM", "l5", "0", "x"], ["DUMP-RESTORE", "l3", "rs4"],
    ["RPUSH", "l6", "a", "b", "c"], ["BLPOP", "l6", "0"], ["BRPOP", "none1", "l6", "0"], ["BLMOVE", "l6", "l7", "LEFT", "LEFT", "0"],
    ["RPUSH", "l6", "x", "y"], ["BRPOPLPUSH", "l6", "l7", "0"], ["BLMPOP", "0", "1", "l6", "RIGHT", "COUNT", "3"],
    ["ZADD", "z1", "1", "a", "2", "b", "3", "c"], ["ZADD", "z1", "1", "a"], ["ZADD", "z1", "XX", "5", "new"], ["ZADD", "z1", "CH", "9", "a"],
    ["ZADD", "z1", "INCR", "1", "b"], ["ZADD", "z1", "GT", "INCR", "-1", "b"], ["ZINCRBY", "z1", "1", "c"], ["ZINCRBY", "z1", "0", "c"],
    ["ZREM", "z1", "zz"], ["ZREM", "z1", "a"], ["ZADD", "z2", "1", "x", "2", "y", "3", "z", "4", "w"], ["ZREMRANGEBYRANK", "z2", "0", "0"],
    ["ZREMRANGEBYRANK", "z2", "10", "20"], ["ZREMRANGEBYSCORE", "z2", "2", "2"], ["ZREMRANGEBYLEX", "z2", "[w", "[w"], ["ZPOPMIN", "z2"],
    ["ZPOPMAX", "z2"], ["ZPOPMIN", "none1"], ["ZADD", "z3", "1", "a", "2", "b"], ["ZMPOP", "1", "z3", "MAX", "COUNT", "5"],
    ["ZADD", "z3", "1", "a", "2", "b"], ["BZPOPMIN", "z3", "0"], ["BZPOPMAX", "z3", "0"], ["ZADD", "z3", "1", "a"],
    ["BZMPOP", "0", "1", "z3", "MIN"], ["ZADD", "z4", "1", "a", "2", "b"], ["ZUNIONSTORE", "z5", "2", "z4", "z1"],
    ["ZINTERSTORE", "z5", "2", "z4", "z1"], ["ZDIFFSTORE", "z5", "1", "z4"], ["ZINTERSTORE", "z5", "2", "z4", "none1"],
    ["ZINTERSTORE", "z6", "2", "z4", "none1"], ["ZRANGESTORE", "z6", "z4", "0", "0"], ["ZRANGESTORE", "z6", "z4", "5", "6"],
    ["DUMP-RESTORE", "z4", "rs5"], ["ZREMRANGEBYSCORE", "z4", "-inf", "+inf"],
    ["GEOADD", "g1", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"], ["GEOADD", "g1", "NX", "1", "1", "Palermo"],
    ["GEOSEARCHSTORE", "g2", "g1", "FROMMEMBER", "Palermo", "BYRADIUS", "200", "km"], ["GEORADIUS", "g1", "15", "37", "200", "km", "STOREDIST", "g3"],
    ["GEOSEARCHSTORE", "g2", "g1", "FROMMEMBER", "Palermo", "BYRADIUS", "1", "m"], ["GEORADIUS", "none1", "15", "37", "1", "km", "STORE", "g3"],
    ["RPUSH", "so", "3", "1", "2"], ["SORT", "so", "STORE", "so2"], ["SORT", "so", "BY", "nosort", "GET", "#", "STORE", "so2"], ["SORT", "none1", "STORE", "so2"],
    ["XADD", "x1", "1-1", "f", "v"], ["XADD", "x1", "MAXLEN", "1", "2-1", "f", "v"], ["XADD", "none1", "NOMKSTREAM", "1-1", "f", "v"],
    ["XDEL", "x1", "2-1", "9-9"], ["XDEL", "x1", "9-9"], ["XADD", "x1", "3-1", "f", "v"], ["XTRIM", "x1", "MAXLEN", "0"], ["XTRIM", "x1", "MAXLEN", "0"],
    ["XSETID", "x1", "5-5"], ["XGROUP", "CREATE", "x1", "g", "0"], ["XGROUP", "CREATE", "x2", "g", "$", "MKSTREAM"], ["XGROUP", "SETID", "x1", "g", "0"],
    ["XGROUP", "CREATECONSUMER", "x1", "g", "c"], ["XGROUP", "CREATECONSUMER", "x1", "g", "c"], ["XADD", "x1", "6-1", "f", "v"],
    ["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "x1", ">"], ["XACK", "x1", "g", "6-1"], ["XGROUP", "DELCONSUMER", "x1", "g", "c"],
    ["XGROUP", "DESTROY", "x1", "g"], ["XGROUP", "DESTROY", "x1", "g"], ["RENAME", "x2", "x3"],
    ["EVAL", "redis.call('set', KEYS[1], 'v') redis.call('expire', KEYS[1], 100) redis.call('del', KEYS[1]) return redis.call('lpush', KEYS[2], 'x')", "2", "s1", "s2"],
    ["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "s2"],
    ["LCS", "a", "b"], ["GET", "nothing"], ["FLUSHDB"], ["SET", "x", "1"], ["FLUSHALL"], ["SET", "y", "1"],
    # A transaction's events are published at its commit, before the messages of the PUBLISHes
    # queued in it (Redis publishes each as its command runs): PUBLISH last orders both alike.
    ["TRANSACTION", ["SET", "t1", "v"], ["HSET", "t2", "f", "v"], ["DEL", "t1"], ["PUBLISH", "plain", "after"]],
]

MARKER_CHANNEL = "__marker__"


def run_and_collect(port: int, classes: str, patterns) -> list:
    """Runs COMMANDS with notify-keyspace-events `classes` and returns, per command, the
    (channel, message) pairs a subscriber to `patterns` received before the command's marker."""
    client = redis.Redis(port=port, decode_responses=True)
    client.flushall()
    client.config_set("notify-keyspace-events", classes)
    listener = client.pubsub()
    listener.psubscribe(*patterns, MARKER_CHANNEL, "plain")
    for _ in patterns + [MARKER_CHANNEL, "plain"]:
        assert listener.get_message(timeout=5)["type"] == "psubscribe"
    received = []
    try:
        for number, command in enumerate(COMMANDS):
            run(client, command)
            client.publish(MARKER_CHANNEL, str(number))
            events = []
            while True:
                message = listener.get_message(timeout=5)
                assert message is not None, f"the marker of {command} did not arrive"
                if message["channel"] == MARKER_CHANNEL:
                    break
                events.append((message["channel"], message["data"]))
            received.append((command, events))
    finally:
        client.config_set("notify-keyspace-events", "")
        listener.close()
        client.close()
    return received


def run(client, command):
    if command[0] == "TRANSACTION":
        pipeline = client.pipeline(transaction=True)
        for queued in command[1:]:
            pipeline.execute_command(*queued)
        pipeline.execute()
        return
    if command[0] == "DUMP-RESTORE":
        payload = client.dump(command[1])
        client.execute_command("RESTORE", command[2], "0", payload, *command[3:])
        return
    try:
        client.execute_command(*command)
    except redis.ResponseError:
        pass


@pytest.mark.parametrize("classes,patterns", [("KEA", ["__key*__:*"]), ("Eh", ["__keyevent@*__:*"]), ("Kg$", ["__keyspace@0__:*"])])
def test_every_write_publishes_the_events_redis_publishes(shared_server, reference_redis, classes, patterns):
    ours = run_and_collect(shared_server.port, classes, patterns)
    theirs = run_and_collect(reference_redis, classes, patterns)
    assert sum(len(events) for _, events in theirs) > 5, "the script makes events of these classes"
    for (command, got), (_, expected) in zip(ours, theirs):
        assert got == expected, command


def test_an_expired_key_is_announced_by_the_background_sweep(make_server):
    server = make_server()
    client = server.client()
    client.config_set("notify-keyspace-events", "Ex")
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.subscribe("__keyevent@0__:expired")
    client.set("short", "v", px=50)
    client.set("long", "v", ex=1000)
    # The sweep visits every index partition within about 6.4 s (docs/design/server.md).
    deadline = time.monotonic() + 15
    message = None
    while message is None and time.monotonic() < deadline:
        message = listener.get_message(timeout=1)
    assert message is not None and message["data"] == "short"
    assert listener.get_message(timeout=0.5) is None, "only the expired key"
    listener.close()


def test_the_configuration_reads_and_prints_as_redis(r):
    for given, shown in [("KEA", "AKE"), ("Eg$x", "g$xE"), ("Kgh$lszet", "g$lshzetK"), ("", "")]:
        assert r.config_set("notify-keyspace-events", given)
        assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": shown}
    with pytest.raises(redis.ResponseError, match="Invalid event class character"):
        r.config_set("notify-keyspace-events", "KQ")
    for unsupported in ["KEAn", "KEm"]:
        with pytest.raises(redis.ResponseError, match="'n' .new key. and 'm' .key miss. are not supported"):
            r.config_set("notify-keyspace-events", unsupported)
    assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": ""}, "a refused setting changes nothing"


def test_nothing_is_published_by_default_or_for_a_write_that_failed(r, shared_server):
    raw = RawClient(shared_server.port)
    raw.exchange("PSUBSCRIBE", "__key*__:*")
    r.set("quiet", "v")
    assert raw.read() == b"", "off by default"
    r.config_set("notify-keyspace-events", "KEA")
    r.set("s", "text")
    raw.read()
    with pytest.raises(redis.ResponseError):
        r.incr("s")
    assert raw.read() == b"", "a refused write announces nothing"
    r.config_set("notify-keyspace-events", "")
    raw.close()


def test_a_write_refused_for_space_announces_nothing(make_server):
    server = make_server("--data-bytes", "32MiB", "--index-bytes", "4MiB")
    client = server.client()
    client.config_set("notify-keyspace-events", "E$")
    listener = client.pubsub()
    listener.subscribe("__keyevent@0__:set")
    assert listener.get_message(timeout=5)["type"] == "subscribe"
    value = "v" * 100_000
    written = 0
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for number in range(1000):
            client.set(f"k{number}", value)
            written += 1
    announced = []
    while (message := listener.get_message(timeout=0.5)) is not None:
        announced.append(message["data"])
    assert announced == [f"k{number}" for number in range(written)], "the refused SET is not announced"
    listener.close()
