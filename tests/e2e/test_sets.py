"""Sets, small (one record) and big (a root record plus buckets, as big hashes): the set commands
against hybridkv and redis-server give the same answers whatever the sets' sizes, SSCAN and the
random commands keep their promises, WATCH sees set writes, and a set survives restarts and
crashes whole. Replies and errors of small sets are compared one by one in test_compare_redis.py
("sets"), their keyspace events in test_keyspace_events.py."""

import pytest
import redis

from conftest import RawClient, assert_same, assert_same_replies, assert_watch_sees, both, in_pipelined_batches, run_script, whole_scan

MEMBERS = 20_000


def fill(client, key, members):
    in_pipelined_batches(client, members, lambda pipe, member: pipe.sadd(key, member))


def full_sscan(client, key, count=500):
    return whole_scan(client.sscan, key, count)


def test_big_sets_answer_as_redis_through_growth_algebra_and_shrinking(pair):
    both(pair, lambda client: fill(client, "big", (f"member:{number}" for number in range(MEMBERS))))
    both(pair, lambda client: fill(client, "odd", (f"member:{number}" for number in range(1, MEMBERS + 5000, 2))))
    both(pair, lambda client: client.sadd("small", "member:4", "member:5", "other"))
    assert_same(pair, lambda client: client.dbsize())
    assert_same(pair, lambda client: (client.scard("big"), client.type("big"), client.object("encoding", "big")))
    assert_same(pair, lambda client: client.smembers("big"))
    assert_same(pair, lambda client: client.smismember("big", ["member:0", "member:19999", "member:20000", "x"]))
    assert_same(pair, lambda client: client.sinter("big", "odd", "small"))
    assert_same(pair, lambda client: (client.sintercard(2, ["big", "odd"]), client.sintercard(2, ["odd", "big"], limit=100)))
    assert_same(pair, lambda client: client.sunion("big", "odd", "small"))
    assert_same(pair, lambda client: client.sdiff("big", "odd"))
    assert_same(pair, lambda client: client.sdiff("odd", "big"))
    assert_same(pair, lambda client: (client.sunionstore("union", "odd", "big"), client.smembers("union")))
    assert_same(pair, lambda client: (client.sinterstore("union", "small", "big"), client.smembers("union")))
    assert_same(pair, lambda client: (client.sdiffstore("big", "big", "odd"), client.scard("big")))
    assert_same(pair, lambda client: sorted(full_sscan(client, "big")))
    assert_same(pair, lambda client: (client.smove("big", "small", "member:0"), client.smove("odd", "big", "member:1")))
    assert_same(pair, lambda client: client.srem("big", *[f"member:{number}" for number in range(0, MEMBERS, 2)]))
    assert_same(pair, lambda client: (client.scard("big"), client.smembers("big"), client.object("encoding", "big")))
    assert_same(pair, lambda client: sorted(client.keys("*")))
    assert_same(pair, lambda client: sorted(client.scan_iter(_type="set")))


def test_sscan_returns_every_member_present_throughout_while_the_set_grows(shared_server):
    client = shared_server.client(decode_responses=True)
    client.delete("growing")
    fill(client, "growing", (f"m{number}" for number in range(5000)))
    cursor, seen, added = 0, set(), 5000
    while True:
        cursor, page = client.sscan("growing", cursor, count=200)
        seen.update(page)
        fill(client, "growing", (f"m{number}" for number in range(added, added + 300)))
        added += 300
        if cursor == 0:
            break
    assert {f"m{number}" for number in range(5000)} <= seen
    assert seen <= {f"m{number}" for number in range(added)}
    assert full_sscan(client, "growing", count=100_000) and len(set(full_sscan(client, "growing"))) == added


def test_random_members_of_a_big_set_are_members_and_spop_drains_it(r):
    fill(r, "big", (str(number) for number in range(MEMBERS)))
    members = {str(number) for number in range(MEMBERS)}
    distinct = r.srandmember("big", 500)
    assert len(distinct) == 500 and len(set(distinct)) == 500 and set(distinct) <= members
    repeated = r.srandmember("big", -3000)
    assert len(repeated) == 3000 and set(repeated) <= members
    assert r.srandmember("big") in members
    popped = set()
    while r.exists("big"):
        batch = r.spop("big", 1500)
        assert batch and not popped & set(batch)
        popped.update(batch)
        assert r.scard("big") == MEMBERS - len(popped)
    assert popped == members
    with pytest.raises(redis.ResponseError, match="^SRANDMEMBER picks at most 1048576 elements with repetition"):
        r.sadd("one", "m")
        r.srandmember("one", -(2**20 + 1))


def test_watch_sees_set_writes_but_not_an_sadd_that_adds_nothing(shared_server):
    client = shared_server.client(decode_responses=True)
    other = shared_server.client(decode_responses=True)
    client.delete("watched")
    fill(client, "watched", (f"m{number}" for number in range(3000)))
    writes = [
        (lambda: other.sadd("watched", "m7"), False),
        (lambda: other.srem("watched", "absent"), False),
        (lambda: other.sadd("watched", "new"), True),
        (lambda: other.srem("watched", "m9"), True),
        (lambda: other.smove("watched", "elsewhere", "m10"), True),
        (lambda: other.spop("watched"), True),
    ]
    assert_watch_sees(client, other, "watched", writes, lambda pipe, key: pipe.scard(key))
    client.close()
    other.close()


def test_a_store_over_a_big_set_leaves_none_of_its_old_buckets(r):
    fill(r, "big", (f"old:{number}" for number in range(MEMBERS)))
    r.sadd("small", "a", "b")
    r.expire("big", 1000)
    assert r.sunionstore("big", "small") == 2
    assert r.smembers("big") == {"a", "b"} and r.ttl("big") == -1
    fill(r, "big2", (f"old:{number}" for number in range(MEMBERS)))
    fill(r, "mid", (f"new:{number}" for number in range(2000)))
    assert r.sunionstore("big2", "mid") == 2000
    assert sorted(full_sscan(r, "big2")) == sorted(f"new:{number}" for number in range(2000))
    assert int(r.memory_usage("big2", samples=0)) < int(r.memory_usage("mid", samples=0)) * 2
    r.set("plain", "x")
    assert r.sdiffstore("plain", "mid", "big2") == 0 and r.exists("plain") == 0


def test_a_big_set_survives_restart_and_crash(make_server):
    server = make_server()
    client = server.client(decode_responses=True)
    fill(client, "big", (f"member:{number}" for number in range(MEMBERS)))
    client.sadd("small", "x", "1")
    expected = client.smembers("big")
    server.restart()
    client = server.client(decode_responses=True)
    assert client.smembers("big") == expected and client.smembers("small") == {"x", "1"}
    client.sadd("big", "after")
    client.srem("big", "member:0")
    client.sinterstore("copy", "big", "big")
    expected = client.smembers("big")
    server.kill9()
    server.start()
    client = server.client(decode_responses=True)
    assert client.smembers("big") == expected == client.smembers("copy")
    assert sorted(client.keys("*")) == ["big", "copy", "small"]
    assert client.type("big") == "set" and client.dbsize() == 3


def test_set_size_limit_is_a_clear_error(small_blocks_server):
    # 64 KiB write blocks allow 255 parts per key: about 1 MiB of members in one set.
    server = small_blocks_server
    client = server.client(decode_responses=True)
    padding = "x" * 1000
    with pytest.raises(redis.ResponseError, match="^set would hold [0-9]+ bytes of fields, over the limit of 1044480 bytes for one set$"):
        for number in range(5000):
            client.sadd("huge", f"{number}:{padding}")
    assert 900 < client.scard("huge") < 1100
    assert client.srem("huge", f"0:{padding}") == 1
    assert client.delete("huge") == 1 and client.dbsize() == 0


def test_small_sets_of_integers_are_listed_in_ascending_order_as_redis_lists_an_intset(shared_server, reference_redis):
    script = [
        ("c", ["SADD", "ints", "30", "-5", "7", "100000000000", "0"]), ("c", ["SMEMBERS", "ints"]), ("c", ["SSCAN", "ints", "0"]),
        ("c", ["SADD", "more", "7", "30", "2", "-1"]), ("c", ["SINTER", "ints", "more"]), ("c", ["SINTERSTORE", "both", "more", "ints"]),
        ("c", ["SMEMBERS", "both"]), ("c", ["SMOVE", "more", "both", "-1"]), ("c", ["SMEMBERS", "both"]), ("c", ["SREM", "ints", "7"]),
        ("c", ["SMEMBERS", "ints"]), ("c", ["SPOP", "ints", "10"]),
        # More members than one command adds to a bucket before splitting it in memory.
        ("c", ["SADD", "many"] + [str(number) for number in range(400, 0, -1)]), ("c", ["SMEMBERS", "many"]),
    ]
    replies = []
    for port in (shared_server.port, reference_redis):
        client = RawClient(port)
        client.exchange("FLUSHALL")
        replies.append(run_script({"c": client}, script))
    assert_same_replies(*replies)
