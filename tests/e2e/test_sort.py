"""SORT and SORT_RO on big lists, sets and sorted sets, by other keys' values and with GET
patterns, against redis-server; SORT with patterns or STORE runs over every partition, so it
sees and writes other keys atomically, pipelined among other writes too. Replies and errors on
small keys are compared one by one in test_compare_redis.py ("sort"), the events in
test_keyspace_events.py."""

import redis

from conftest import assert_same, both, in_pipelined_batches

ELEMENTS = 5_000


def fill(client):
    client.rpush("numbers", *[str((number * 7919) % ELEMENTS - 100) for number in range(ELEMENTS)])
    client.sadd("ids", *[str(number) for number in range(ELEMENTS)])
    client.zadd("ranked", {f"m{number}": number % 97 for number in range(ELEMENTS)})
    in_pipelined_batches(client, range(ELEMENTS), lambda pipe, number: pipe.set(f"weight:{number}", (number * 31) % 1000))
    in_pipelined_batches(client, range(0, ELEMENTS, 2), lambda pipe, number: pipe.hset(f"object:{number}", mapping={"name": f"n{(number * 13) % ELEMENTS:05}", "size": number % 10}))


def test_sorts_of_big_keys_answer_as_redis(pair):
    both(pair, fill)
    assert_same(pair, lambda client: [client.sort("numbers"), client.sort("numbers", desc=True, start=100, num=50), client.sort("numbers", alpha=True, start=4990, num=20)])
    assert_same(pair, lambda client: client.sort("ids", by="weight:*", start=0, num=200, get=["#", "object:*->name", "weight:*"]))
    assert_same(pair, lambda client: client.sort("ids", by="object:*->name", alpha=True, desc=True, start=10, num=30, get=["#", "object:*->size"]))
    assert_same(pair, lambda client: client.sort("ranked", by="nosort", start=2000, num=40))
    assert_same(pair, lambda client: client.sort("ranked", alpha=True, desc=True, start=0, num=40))
    assert_same(pair, lambda client: (client.sort("ids", by="weight:*", store="sorted"), client.lrange("sorted", 0, 99), client.type("sorted")))
    assert_same(pair, lambda client: (client.sort("numbers", get="object:*->name", store="names"), client.lrange("names", -50, -1)))
    assert_same(pair, lambda client: client.execute_command("SORT_RO", "numbers", "BY", "weight:*", "LIMIT", "0", "25", "GET", "weight:*"))


def test_a_pipelined_sort_by_patterns_among_writes_sees_the_writes_before_it(r):
    r.rpush("queue", 3, 1, 2)
    pipe = r.pipeline(transaction=False)
    for number in (1, 2, 3):
        pipe.set(f"w{number}", 10 - number)
    pipe.sort("queue", by="w*", get="w*", store="out")
    pipe.set("w1", 100)
    pipe.lrange("out", 0, -1)
    replies = pipe.execute()
    assert replies[3] == 3 and replies[5] == ["7", "8", "9"]


def test_a_script_sorts_by_the_keys_it_declared_only(r):
    r.rpush("l", 2, 1)
    r.set("w1", 5)
    r.set("w2", 1)
    assert r.eval("return redis.call('SORT', KEYS[1], 'BY', 'w*')", 3, "l", "w1", "w2") == ["2", "1"]
    try:
        r.eval("return redis.call('SORT', KEYS[1], 'BY', 'w*')", 1, "l")
        raise AssertionError("a script reached keys it did not declare")
    except redis.ResponseError as error:
        assert "not declared" in str(error)
