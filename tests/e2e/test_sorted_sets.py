"""Sorted sets, small (one record) and big (a root record plus buckets, as big hashes): the
sorted-set commands against hybridkv and redis-server give the same answers whatever the sets'
sizes, scores are written as Redis 7.0 writes them byte for byte, BZPOPMIN waits for a ZADD,
WATCH sees sorted-set writes, and a sorted set survives restarts and crashes whole. Replies and
errors of small sets are compared one by one in test_compare_redis.py ("sorted sets"), their
keyspace events in test_keyspace_events.py."""

import random
import threading
import time

import pytest
import redis

from conftest import RawClient, assert_same, assert_same_replies, assert_watch_sees, both, in_pipelined_batches, compare_random_pipelines, run_script, whole_scan

MEMBERS = 20_000


def fill(client, key, scored):
    in_pipelined_batches(client, scored, lambda pipe, pair: pipe.zadd(key, {pair[0]: pair[1]}))


def test_big_sorted_sets_answer_as_redis_through_growth_ranges_and_shrinking(pair):
    # Scores repeat (every 7th member shares one): ties are ordered by member.
    both(pair, lambda client: fill(client, "big", ((f"member:{number}", number // 7) for number in range(MEMBERS))))
    both(pair, lambda client: fill(client, "odd", ((f"member:{number}", -number) for number in range(1, MEMBERS + 5000, 2))))
    both(pair, lambda client: client.zadd("small", {"member:4": 0.5, "member:5": 1.5, "other": 3}))
    assert_same(pair, lambda client: (client.zcard("big"), client.type("big"), client.object("encoding", "big")))
    assert_same(pair, lambda client: client.zrange("big", 0, -1, withscores=True))
    assert_same(pair, lambda client: client.zrange("big", 100, 120, desc=True, withscores=True))
    assert_same(pair, lambda client: client.zrangebyscore("big", 50, "(60", start=3, num=20, withscores=True))
    assert_same(pair, lambda client: client.zrevrangebyscore("odd", "-100", "-inf", start=0, num=5))
    assert_same(pair, lambda client: [client.zrank("big", "member:12345"), client.zrevrank("big", "member:12345"), client.zrank("big", "nope")])
    assert_same(pair, lambda client: (client.zcount("big", 10, 100), client.zscore("big", "member:19999"), client.zmscore("odd", ["member:1", "x"])))
    assert_same(pair, lambda client: client.zunion(["big", "odd", "small"], withscores=True, aggregate="MAX")[:500])
    assert_same(pair, lambda client: client.zinter(["big", "odd"], withscores=True)[:500])
    assert_same(pair, lambda client: (client.zinterstore("both", ["odd", "big"], aggregate="MIN"), client.zrange("both", 0, 20, withscores=True)))
    assert_same(pair, lambda client: (client.zdiffstore("diff", ["big", "odd"]), client.zrange("diff", -20, -1, withscores=True)))
    assert_same(pair, lambda client: sorted(whole_scan(client.zscan, "big")))
    assert_same(pair, lambda client: client.zpopmin("big", 25))
    assert_same(pair, lambda client: client.zpopmax("odd", 3))
    assert_same(pair, lambda client: client.zremrangebyrank("big", 100, 5000))
    assert_same(pair, lambda client: client.zremrangebyscore("big", 1000, 2000))
    assert_same(pair, lambda client: client.zrangestore("copy", "big", 0, 99))
    assert_same(pair, lambda client: client.zrem("big", *[f"member:{number}" for number in range(0, MEMBERS, 2)]))
    assert_same(pair, lambda client: (client.zcard("big"), client.zrange("big", 0, -1, withscores=True), client.object("encoding", "copy")))
    assert_same(pair, lambda client: sorted(client.scan_iter(_type="zset")))


def test_pipelined_zadds_answer_as_redis_whatever_else_touches_their_set(pair):
    # A pipelined group keeps a sorted set open from one ZADD, ZINCRBY or pop to the next;
    # every other command on the key must see the set as written. Sets grow past 8 KiB (buckets and
    # an order index) and shrink back.
    random = __import__("random").Random(46)
    both(pair, lambda client: client.flushdb())
    keys = ["z1", "z2"]

    def member():
        return f"m{random.randrange(3000)}:" + "x" * random.choice((1, 150))

    def next_command():
        key = random.choice(keys)
        if random.random() < 0.01:
            return random.choice([["DEL", key], ["SET", key, "string"]])
        if random.random() < 0.6:
            options = random.choice([[], [], ["NX"], ["XX"], ["GT", "CH"], ["LT"], ["INCR"]])
            pairs = [word for _ in range(1 if "INCR" in options else random.choice((1, 1, 4))) for word in (str(random.randrange(-50, 50)), member())]
            return random.choice([["ZADD", key, *options, *pairs], ["ZINCRBY", key, str(random.randrange(-5, 5)), member()]])
        others = (
            ["ZCARD", key], ["ZRANGE", key, "0", "2", "WITHSCORES"], ["ZRANK", key, member()], ["ZSCORE", key, member()],
            ["ZREM", key, member()], ["ZPOPMIN", key], ["ZPOPMAX", key, "3"], ["ZPOPMIN", key, "0"], ["ZMPOP", "1", key, "MIN", "COUNT", "2"],
            ["ZREMRANGEBYRANK", key, "0", "5"],
            ["EXPIRE", key, "1000"], ["TTL", key], ["TYPE", key], ["LPUSH", key, "x"],
        )
        return random.choice(others)

    largest = compare_random_pipelines(pair, next_command, random, 80, measured_keys=keys)
    assert largest > 16384, f"the largest set took {largest} bytes: none grew into buckets"
    assert_same(pair, lambda client: [(client.type(key), client.ttl(key)) for key in keys])
    assert_same(pair, lambda client: [client.zrange(key, 0, -1, withscores=True) if client.type(key) == "zset" else None for key in keys])


def test_scores_are_written_as_redis_7_0_writes_them(shared_server, reference_redis):
    scores = ["1.1", "-0", "1e20", "0.0001", "1e-5", "123456789012345678", "+inf", "-inf", "3", "0.1", "2.5e-300", "-12.75"]
    script = [("c", ["HELLO", "2"]), ("c", ["ZADD", "f"] + [word for at, score in enumerate(scores) for word in (score, f"m{at}")])]
    for protocol in ("2", "3"):
        script += [
            ("c", ["HELLO", protocol]), ("c", ["ZRANGE", "f", "0", "-1", "WITHSCORES"]), ("c", ["ZSCORE", "f", "m0"]),
            ("c", ["ZMSCORE", "f", "m1", "nope"]), ("c", ["ZSCAN", "f", "0"]), ("c", ["ZINCRBY", "f", "0.2", "m9"]),
            ("c", ["ZADD", "f", "INCR", "1", "m4"]), ("c", ["ZRANDMEMBER", "f", "20", "WITHSCORES"]), ("c", ["ZPOPMIN", "f"]),
            ("c", ["ZPOPMAX", "f", "2"]), ("c", ["ZMPOP", "1", "f", "MIN", "COUNT", "2"]), ("c", ["BZPOPMIN", "f", "0"]),
            ("c", ["ZUNION", "2", "f", "f", "WITHSCORES"]), ("c", ["ZRANGEBYSCORE", "f", "-inf", "+inf", "WITHSCORES", "LIMIT", "0", "3"]),
        ]
    replies = []
    for port in (shared_server.port, reference_redis):
        client = RawClient(port)
        client.exchange("FLUSHALL")
        replies.append(run_script({"c": client}, script))
    assert_same_replies(*replies)


def test_bzpopmin_waits_for_a_zadd_and_each_member_goes_to_one_client(shared_server):
    client = shared_server.client(decode_responses=True)
    client.delete("queue")
    results, waiting = [], []

    def wait():
        waiter = shared_server.client(decode_responses=True)
        waiting.append(True)
        results.append(waiter.bzpopmin("queue", timeout=10))
        waiter.close()

    threads = [threading.Thread(target=wait) for _ in range(4)]
    for thread in threads:
        thread.start()
    while len(waiting) < 4 or int(client.info("clients")["blocked_clients"]) < 4:
        time.sleep(0.01)
    client.zadd("queue", {"c": 3, "a": 1, "b": 2, "d": 4})
    for thread in threads:
        thread.join(timeout=15)
    assert sorted(results) == [("queue", "a", 1.0), ("queue", "b", 2.0), ("queue", "c", 3.0), ("queue", "d", 4.0)]
    assert client.exists("queue") == 0
    started = time.monotonic()
    assert client.bzpopmax(["queue", "other"], timeout=0.2) is None
    assert time.monotonic() - started >= 0.19
    client.close()


def test_watch_sees_sorted_set_writes_but_not_a_zadd_that_changes_nothing(shared_server):
    client = shared_server.client(decode_responses=True)
    other = shared_server.client(decode_responses=True)
    client.delete("watched")
    fill(client, "watched", ((f"m{number}", number) for number in range(3000)))
    writes = [
        (lambda: other.zadd("watched", {"m7": 7}), False),
        (lambda: other.zadd("watched", {"m8": 0}, gt=True), False),
        (lambda: other.zrem("watched", "absent"), False),
        (lambda: other.zremrangebyscore("watched", 5000, 6000), False),
        (lambda: other.zadd("watched", {"new": 1}), True),
        (lambda: other.zincrby("watched", 2, "m9"), True),
        (lambda: other.zpopmin("watched"), True),
        (lambda: other.zremrangebyrank("watched", 0, 0), True),
    ]
    assert_watch_sees(client, other, "watched", writes, lambda pipe, key: pipe.zcard(key))
    client.close()
    other.close()


def test_a_big_sorted_set_survives_restart_and_crash(make_server):
    server = make_server()
    client = server.client(decode_responses=True)
    fill(client, "big", ((f"member:{number}", number * 0.5) for number in range(MEMBERS)))
    client.zadd("small", {"x": 1, "y": -1})
    expected = client.zrange("big", 0, -1, withscores=True)
    server.restart()
    client = server.client(decode_responses=True)
    assert client.zrange("big", 0, -1, withscores=True) == expected and client.zrange("small", 0, -1) == ["y", "x"]
    client.zadd("big", {"after": -5})
    client.zincrby("big", 100_000, "member:0")
    client.zunionstore("copy", ["big"])
    expected = client.zrange("big", 0, -1, withscores=True)
    server.kill9()
    server.start()
    client = server.client(decode_responses=True)
    assert client.zrange("big", 0, -1, withscores=True) == expected == client.zrange("copy", 0, -1, withscores=True)
    assert client.zrange("big", 0, 0) == ["after"] and client.zrevrange("big", 0, 0) == ["member:0"]
    assert sorted(client.keys("*")) == ["big", "copy", "small"] and client.type("big") == "zset"


def test_dump_and_restore_move_sorted_sets_between_hybridkv_and_redis(pair):
    ours, theirs = pair
    for client in (ours, theirs):
        client.zadd("small", {"a": 1.5, "b": -0.0, "c": float("inf")})
        fill(client, "big", ((f"member:{number}", number / 3) for number in range(300)))
    for source, target in ((ours, theirs), (theirs, ours)):
        for key in ("small", "big"):
            target.restore(f"{key}-restored", 0, source.dump(key))
            assert target.zrange(f"{key}-restored", 0, -1, withscores=True) == source.zrange(key, 0, -1, withscores=True)
    assert_same(pair, lambda client: client.object("encoding", "big-restored"))


def test_sorted_set_size_limit_is_a_clear_error(small_blocks_server):
    # 64 KiB write blocks allow 255 parts per key: about 1 MiB of members in one sorted set.
    server = small_blocks_server
    client = server.client(decode_responses=True)
    padding = "x" * 1000
    with pytest.raises(redis.ResponseError, match="^zset would hold [0-9]+ bytes of fields, over the limit of 1044480 bytes for one zset$"):
        for number in range(5000):
            client.zadd("huge", {f"{number}:{padding}": number})
    assert 900 < client.zcard("huge") < 1100
    assert client.zpopmin("huge") == [(f"0:{padding}", 0.0)]
    assert client.delete("huge") == 1 and client.dbsize() == 0


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_a_sorted_set_filled_from_either_end_holds_what_its_hash_holds(make_server, tmp_path, order):
    # Members coming in descending order used to split the order index's first chunk in halves
    # again and again: its parts ran out at about half the members the hash holds. 64 KiB
    # blocks as small_blocks_server's, with room for the rewritten chunks while
    # defragmentation catches up (64 MiB filled up on a loaded machine: "data tier full"). The
    # room is a flag: the harness passes --data-bytes, which overrides a config's data_bytes.
    config = tmp_path / "small-blocks-roomy.toml"
    config.write_text('[[namespace]]\nname = "small"\nwrite_block_bytes = "64KiB"\n')
    client = make_server("--config", str(config), "--data-bytes", "256MiB").client(decode_responses=True)
    assert client.info("memory")["ns_small_data_capacity_bytes"] == 256 << 20
    sign = 1 if order == "ascending" else -1
    added = 0
    with pytest.raises(redis.ResponseError, match="zset would hold [0-9]+ bytes of fields, over the limit of 1044480 bytes for one zset"):
        while True:
            pipe = client.pipeline(transaction=False)
            for number in range(added, added + 500):
                pipe.zadd("filled", {f"m{number:09d}": sign * number})
            pipe.execute()
            added += 500
    assert client.zcard("filled") > 50_000
    first = 0 if order == "ascending" else client.zcard("filled") - 1
    assert client.zrange("filled", 0, 0) == [f"m{first:09d}"]


def big_sorted_set_command(rng: random.Random) -> list:
    """A command on "mixed" (3,000 members, scores that tie) or "flat" (every score 0, where
    lexicographic ranges are defined), both bucketed with an order index."""
    member = f"m{rng.randrange(3500):04d}"
    score, bound = str(rng.randrange(-5, 60)), rng.choice(["-inf", "+inf", "(10", "10", "25", "(25", "55"])
    lex = rng.choice(["-", "+", "[m1", "(m1", "[m2500", "(m0300", "[m3499"])
    choices = [
        lambda: ["ZADD", "mixed", score, member],
        lambda: ["ZADD", "mixed"] + rng.choice([["GT"], ["LT"], ["XX"], ["NX"]]) + ["CH", score, member],
        lambda: ["ZINCRBY", "mixed", rng.choice(["1", "-2.5"]), member],
        lambda: ["ZREM", "mixed", member, f"m{rng.randrange(3500):04d}"],
        lambda: [rng.choice(["ZSCORE", "ZRANK", "ZREVRANK"]), "mixed", member],
        lambda: ["ZRANGE", "mixed", str(rng.randrange(-3100, 3100)), str(rng.randrange(-3100, 3100))] + rng.choice([[], ["REV"], ["WITHSCORES"]]),
        lambda: ["ZRANGE", "mixed", bound, rng.choice(["-inf", "+inf", "(30", "30", "59"]), "BYSCORE", "LIMIT", str(rng.randrange(-1, 40)), str(rng.randrange(-1, 20))],
        lambda: ["ZRANGE", "mixed", rng.choice(["+inf", "(40", "40"]), bound, "BYSCORE", "REV", "LIMIT", str(rng.randrange(0, 40)), str(rng.randrange(-1, 20))],
        lambda: ["ZCOUNT", "mixed", bound, rng.choice(["+inf", "(30", "59"])],
        lambda: [rng.choice(["ZPOPMIN", "ZPOPMAX"]), "mixed", str(rng.randrange(1, 4))],
        lambda: ["ZREMRANGEBYRANK", "mixed", str(rng.randrange(0, 3000)), str(rng.randrange(0, 3000))] if rng.random() < 0.2 else ["ZCARD", "mixed"],
        lambda: ["ZREMRANGEBYSCORE", "mixed", score, score],
        lambda: ["ZADD", "flat", "0", member],
        lambda: ["ZRANGEBYLEX", "flat", lex, rng.choice(["+", "[m2000", "(m0500"]), "LIMIT", str(rng.randrange(0, 30)), str(rng.randrange(1, 10))],
        lambda: ["ZREVRANGEBYLEX", "flat", rng.choice(["+", "[m2000", "(m0500"]), lex, "LIMIT", "0", "5"],
        lambda: ["ZLEXCOUNT", "flat", lex, rng.choice(["+", "[m2000", "(m0500"])],
        lambda: ["ZREMRANGEBYLEX", "flat", f"[{member}", f"({member}a"],
    ]
    return rng.choice(choices)()


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_random_commands_on_big_sorted_sets_answer_as_redis(pair, seed):
    rng = random.Random(seed)
    for client in pair:
        fill(client, "mixed", ((f"m{number:04d}", number % 50) for number in range(3000)))
        fill(client, "flat", ((f"m{number:04d}", 0) for number in range(0, 3000, 2)))
    raw = [redis.Redis(port=client.connection_pool.connection_kwargs["port"], decode_responses=True) for client in pair]
    for client in raw:
        client.response_callbacks.clear()
    assert raw[0].object("encoding", "mixed") == "skiplist"
    for step in range(1500):
        command = big_sorted_set_command(rng)
        replies = []
        for client in raw:
            try:
                replies.append(client.execute_command(*command))
            except redis.ResponseError as error:
                replies.append(("error", str(error)))
        assert replies[0] == replies[1], f"step {step}: {command}"
    for key in ("mixed", "flat"):
        assert raw[0].zrange(key, 0, -1, withscores=True) == raw[1].zrange(key, 0, -1, withscores=True)
