"""Hashes large enough to be stored as a root record plus buckets (crates/server/src/hash_layout.rs):
the same commands against hybridkv and redis-server give the same answers, the buckets are never
keys, and the hash survives restarts and crashes whole."""

import time

import pytest
import redis

from conftest import assert_same, both, compare_random_pipelines

FIELDS = 20_000
VALUE_PAD = "v" * 24


def fill(client, key, count, start=0):
    pipe = client.pipeline(transaction=False)
    for number in range(start, start + count):
        pipe.hset(key, f"field:{number}", f"{VALUE_PAD}{number}")
        if number % 1000 == 999:
            pipe.execute()
    pipe.execute()


def full_hscan(client, key):
    cursor, seen = 0, {}
    while True:
        cursor, page = client.hscan(key, cursor, count=500)
        seen.update(page)
        if cursor == 0:
            return seen


def keyspace(client):
    return {
        "dbsize": client.dbsize(),
        "keys": sorted(client.keys("*")),
        "scan": sorted(client.scan_iter(count=100)),
        "scan_hash": sorted(client.scan_iter(_type="hash")),
        "scan_string": sorted(client.scan_iter(_type="string")),
    }


def snapshot(client, key):
    """Everything the hash commands say about `key`, in order-independent form."""
    return {
        "type": client.type(key),
        "exists": client.exists(key),
        "hlen": client.hlen(key),
        "all": client.hgetall(key),
        "keys": sorted(client.hkeys(key)),
        "values": sorted(client.hvals(key)),
        "scan": full_hscan(client, key),
        "get": [client.hget(key, f"field:{number}") for number in (0, 7, 19_999, 25_000)],
        "exists_field": [client.hexists(key, f"field:{number}") for number in (1, 30_000)],
        "strlen": [client.hstrlen(key, f"field:{number}") for number in (2, 30_000)],
        "mget": client.hmget(key, ["field:3", "nope", "field:19998"]),
    }


def test_big_hash_answers_as_redis_through_growth_and_shrinking(pair):
    both(pair, lambda c: fill(c, "big", FIELDS))
    both(pair, lambda c: c.set("plain", "x"))
    assert_same(pair, lambda c: snapshot(c, "big"))
    assert_same(pair, keyspace)
    assert_same(pair, lambda c: [c.hincrby("big", "counter", 5), c.hincrby("big", "counter", -2)])
    assert_same(pair, lambda c: c.hincrbyfloat("big", "float", 1.5))
    assert_same(pair, lambda c: [c.hsetnx("big", "field:5", "no"), c.hsetnx("big", "fresh", "yes")])
    assert_same(pair, lambda c: c.hset("big", mapping={"field:1": "changed", "new:1": "a", "new:2": "b"}))
    for client in pair:
        with pytest.raises(redis.ResponseError) as raised:
            client.hincrby("big", "field:9", 1)
        assert "not an integer" in str(raised.value)
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.get("big")
    # HDEL down across the bucketed → one-record boundary, then to nothing.
    assert_same(pair, lambda c: c.hdel("big", *[f"field:{n}" for n in range(0, FIELDS, 2)], "absent"))
    assert_same(pair, lambda c: snapshot(c, "big"))
    assert_same(pair, lambda c: [c.hdel("big", *[f"field:{n}" for n in range(1, FIELDS - 20, 2)])])
    assert_same(pair, lambda c: snapshot(c, "big"))
    assert_same(pair, keyspace)
    remaining = pair[0].hkeys("big")
    assert_same(pair, lambda c: c.hdel("big", *remaining))
    assert_same(pair, lambda c: [c.exists("big"), c.hlen("big"), c.hgetall("big")])
    assert_same(pair, keyspace)


def test_key_commands_on_a_big_hash_act_on_the_whole_hash(pair):
    both(pair, lambda c: fill(c, "big", FIELDS))
    assert_same(pair, lambda c: [c.expire("big", 1000), c.ttl("big"), c.persist("big"), c.ttl("big")])
    assert_same(pair, lambda c: [c.rename("big", "moved"), c.exists("big"), c.hlen("moved")])
    assert_same(pair, lambda c: snapshot(c, "moved"))
    both(pair, lambda c: fill(c, "other", 3000))
    assert_same(pair, lambda c: [c.renamenx("moved", "other"), c.rename("moved", "other")])
    assert_same(pair, lambda c: snapshot(c, "other"))
    assert_same(pair, keyspace)
    # Replacing or deleting the hash leaves nothing of it behind.
    assert_same(pair, lambda c: [c.set("other", "string now"), c.type("other"), c.hset("other2", "a", "1")])
    assert_same(pair, lambda c: [c.delete("other"), c.hset("other", "only", "1"), c.hgetall("other")])
    both(pair, lambda c: fill(c, "again", FIELDS))
    assert_same(pair, lambda c: [c.delete("again"), c.hset("again", "one", "1"), c.hgetall("again"), c.hlen("again")])
    assert_same(pair, keyspace)
    assert_same(pair, lambda c: [c.flushdb(), c.dbsize(), c.randomkey(), c.keys("*")])


def test_an_expired_big_hash_is_gone_and_its_key_starts_fresh(pair):
    both(pair, lambda c: fill(c, "short", FIELDS))
    assert_same(pair, lambda c: c.pexpire("short", 300))
    time.sleep(0.5)
    assert_same(pair, lambda c: [c.exists("short"), c.hlen("short"), c.hget("short", "field:1"), c.keys("*")])
    assert_same(pair, lambda c: [c.hset("short", "a", "1"), c.hgetall("short"), c.ttl("short")])


def test_watch_sees_a_write_to_any_bucket(pair):
    ours, _ = pair
    fill(ours, "big", FIELDS)
    other = redis.Redis(port=ours.connection_pool.connection_kwargs["port"], decode_responses=True)
    with ours.pipeline() as pipe:
        pipe.watch("big")
        other.hset("big", "field:123", "changed elsewhere")
        pipe.multi()
        pipe.hset("big", "field:124", "mine")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    with ours.pipeline() as pipe:
        pipe.multi()
        pipe.hset("big", "field:124", "mine")
        pipe.hdel("big", "field:125")
        pipe.hlen("big")
        assert pipe.execute() == [0, 1, FIELDS - 1]
    # A value replaced by one of its size leaves the hash's root as it was: WATCH still sees it.
    same_size = f"{VALUE_PAD}999"
    assert len(same_size) == len(ours.hget("big", "field:200"))
    with ours.pipeline() as pipe:
        pipe.watch("big")
        other.hset("big", "field:200", same_size)
        pipe.multi()
        pipe.hset("big", "field:201", "mine")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    other.close()


def log_bytes_written(client):
    return client.info("persistence")["ns_default_log_bytes_written"]


def test_a_same_size_update_writes_the_root_only_while_keys_are_watched(make_server):
    """The root of a bucketed hash is rewritten when it changes, or while some client watches
    keys (WATCH compares the root's version); otherwise an update logs its bucket only. A fresh
    server with a hash within one write block: no defragmentation appends meanwhile."""
    server = make_server()
    client = server.client(decode_responses=True)
    fill(client, "big", 600)
    assert len(client.hget("big", "field:300")) == len(f"{VALUE_PAD}300")

    def bytes_of_update(value_number):
        """Log bytes of replacing field:300 (always the same bucket) by a value of its size."""
        before = log_bytes_written(client)
        assert client.hset("big", "field:300", f"{VALUE_PAD}{value_number}") == 0
        return log_bytes_written(client) - before

    unwatched = bytes_of_update(301)
    assert bytes_of_update(302) == unwatched, "the bucket no longer splits"
    watcher = server.client(decode_responses=True)
    watcher.execute_command("WATCH", "some-other-key")
    watched = bytes_of_update(303)
    watcher.execute_command("UNWATCH")
    assert watched > unwatched > 0
    assert bytes_of_update(304) == unwatched
    watcher.close()
    client.close()


def test_big_hash_survives_restart_and_crash(make_server):
    server = make_server()
    client = server.client(decode_responses=True)
    fill(client, "big", FIELDS)
    client.set("plain", "x")
    expected = client.hgetall("big")
    server.restart()
    client = server.client(decode_responses=True)
    assert client.dbsize() == 2
    assert client.hgetall("big") == expected
    client.hset("big", "after", "restart")
    client.hdel("big", "field:0")
    expected = client.hgetall("big")
    server.kill9()
    server.start()
    client = server.client(decode_responses=True)
    assert client.hgetall("big") == expected
    assert sorted(client.keys("*")) == ["big", "plain"]
    assert client.dbsize() == 2


def test_hash_size_limit_is_a_clear_error(small_blocks_server):
    # 64 KiB write blocks allow 255 parts per key: about 1 MiB of fields in one hash.
    server = small_blocks_server
    client = server.client(decode_responses=True)
    value = "x" * 1000
    with pytest.raises(redis.ResponseError, match="over the limit of 1044480 bytes for one hash"):
        for number in range(5000):
            client.hset("huge", f"field:{number}", value)
    assert 900 < client.hlen("huge") < 1100
    assert client.hset("huge", "field:0", "still writable") == 0
    assert client.delete("huge") == 1
    assert client.dbsize() == 0


def hscan_pages(client, key, count, between_calls=lambda: None, **options):
    """Walks HSCAN to the end: the pages (field -> value dicts) in order."""
    cursor, pages = 0, []
    while True:
        cursor, page = client.hscan(key, cursor, count=count, **options)
        pages.append(page)
        if cursor == 0:
            return pages
        between_calls()


def test_hrandfield_samples_a_big_hash_by_buckets(r):
    """Distinct picks are distinct and come from the hash; repeated picks are exactly as many as
    asked; WITHVALUES pairs each field with its own value; all of a hash when asked for more."""
    fields = {f"field:{number}": f"value:{number}:" + "v" * 300 for number in range(2000)}
    pipe = r.pipeline(transaction=False)
    for field, value in fields.items():
        pipe.hset("big", field, value)
    pipe.execute()
    assert r.type("big") == "hash" and r.hlen("big") == 2000
    assert r.hrandfield("big") in fields
    distinct = r.hrandfield("big", 50)
    assert len(distinct) == 50 and len(set(distinct)) == 50 and set(distinct) <= fields.keys()
    repeated = r.hrandfield("big", -300)
    assert len(repeated) == 300 and set(repeated) <= fields.keys()
    pairs = r.hrandfield("big", 20, withvalues=True)
    assert len(pairs) == 40 and all(fields[field] == value for field, value in zip(pairs[::2], pairs[1::2]))
    most = r.hrandfield("big", 1500)
    assert len(most) == 1500 and len(set(most)) == 1500 and set(most) <= fields.keys(), "over a third: from the whole hash"
    assert sorted(r.hrandfield("big", 5000)) == sorted(fields), "more than there are: all of them"
    with pytest.raises(redis.ResponseError, match="^HRANDFIELD picks at most 1048576 elements with repetition"):
        r.hrandfield("big", -(2**20 + 1))
    assert r.hrandfield("missing", -(2**20)) == []


def test_hscan_walks_a_big_hash_with_a_cursor(pair):
    ours, theirs = pair
    both(pair, lambda c: fill(c, "big", FIELDS))
    pages = hscan_pages(ours, "big", count=100)
    # Buckets of about 1 KiB hold about 25 of these fields: pages are COUNT or a bucket more.
    assert len(pages) > FIELDS // 300
    assert all(len(page) < 500 for page in pages)
    seen = {field: value for page in pages for field, value in page.items()}
    assert seen == theirs.hgetall("big")
    assert_same(pair, lambda c: dict(c.hscan_iter("big", match="field:1*", count=50)))
    # NOVALUES came with Redis 7.4 (the reference here may be older): the fields MATCH finds.
    assert sorted(ours.hscan_iter("big", match="field:2?", no_values=True)) == sorted(dict(theirs.hscan_iter("big", match="field:2?")))
    # A small hash answers everything at once, as Redis does for its small encoding.
    both(pair, lambda c: c.hset("small", mapping={"a": "1", "b": "2", "c": "3"}))
    assert_same(pair, lambda c: c.hscan("small", 0, count=1))
    assert_same(pair, lambda c: [c.hscan("missing", 0), c.hscan("big", 0, count=10, match="nothing*")[1]])
    for client in pair:
        with pytest.raises(redis.ResponseError, match="invalid cursor"):
            client.execute_command("HSCAN", "big", "12abc")


def test_hscan_returns_every_field_present_throughout_while_the_hash_grows_or_shrinks(shared_server):
    client = shared_server.client(decode_responses=True)
    client.flushall()
    fill(client, "big", 4000)
    present = set(client.hkeys("big"))
    added = iter(range(10**6))

    def grow():
        client.hset("big", mapping={f"new:{next(added)}": VALUE_PAD for _ in range(300)})

    pages = hscan_pages(client, "big", count=50, between_calls=grow)
    assert len(pages) > 10
    assert present <= {field for page in pages for field in page}
    grown = client.hlen("big")
    assert grown > 4000 + 10 * 300

    # Shrinking: fields outside `kept` go between calls, buckets merge back.
    kept = {f"field:{number}" for number in range(0, 4000, 7)}
    doomed = iter(sorted(set(client.hkeys("big")) - kept))

    def shrink():
        batch = [field for _, field in zip(range(400), doomed)]
        if batch:
            client.hdel("big", *batch)

    pages = hscan_pages(client, "big", count=50, between_calls=shrink)
    assert kept <= {field for page in pages for field in page}
    assert client.hlen("big") < grown
    client.close()


def test_rename_or_copy_of_a_hash_bigger_than_a_write_block_is_a_clear_error(small_blocks_server):
    server = small_blocks_server
    client = server.client(decode_responses=True)
    for number in range(20):
        client.hset("fits", f"field:{number}", "x" * 1000)
    assert client.rename("fits", "moved") is True
    assert client.hlen("moved") == 20 and client.exists("fits") == 0
    assert client.copy("moved", "copied") is True
    assert client.hgetall("copied") == client.hgetall("moved") and client.hlen("copied") == 20
    client.hdel("copied", "field:0")
    assert client.hlen("moved") == 20, "the copy's buckets are its own"
    # 200 KB of fields: about 50 buckets, which one 64 KiB write block cannot hold.
    pipe = client.pipeline(transaction=False)
    for number in range(200):
        pipe.hset("big", f"field:{number}", "x" * 1000)
    pipe.execute()
    client.hset("target", "old", "value")
    expected = client.hgetall("big")
    for command in (lambda: client.rename("big", "target"), lambda: client.renamenx("big", "fresh")):
        with pytest.raises(redis.ResponseError, match=r"cannot rename a key whose \d+ parts take \d+ bytes.*write block of 65472 bytes"):
            command()
    with pytest.raises(redis.ResponseError, match=r"cannot copy a key whose \d+ parts take \d+ bytes.*write block of 65472 bytes"):
        client.copy("big", "target", replace=True)
    # Nothing moved.
    assert client.hgetall("big") == expected
    assert client.hgetall("target") == {"old": "value"}
    assert client.exists("fresh") == 0
    assert sorted(client.keys("*")) == ["big", "copied", "moved", "target"]
    client.close()


# The last Unix millisecond an expiry may name (2^48 - 2: the engine's 48-bit expiry field, whose
# largest value marks the records of a key's parts).
EXPIRY_UNIX_MS_MAX = 2**48 - 2


def test_a_big_hash_moves_and_copies_to_another_database_whole(shared_server):
    zero, two = shared_server.client(), shared_server.client(db=2)
    zero.delete("moving")
    two.flushdb()
    fill(zero, "moving", FIELDS)
    fields = zero.hgetall("moving")
    assert zero.move("moving", 2) is True
    assert zero.exists("moving") == 0 and two.hlen("moving") == FIELDS and two.hgetall("moving") == fields
    assert two.dbsize() == 1, "buckets are parts, not keys"
    assert two.move("moving", 0) is True and zero.hget("moving", "field:7") == f"{VALUE_PAD}7"
    assert zero.copy("moving", "copied", destination_db=2) is True
    zero.hset("moving", "field:7", "changed")
    assert two.hgetall("copied") == fields and two.dbsize() == 1


def test_memory_usage_counts_every_bucket_or_estimates_from_samples(r):
    r.delete("usage")
    fill(r, "usage", FIELDS)
    field_bytes = sum(len(f"field:{n}") + len(f"{VALUE_PAD}{n}") for n in range(FIELDS))
    exact = r.memory_usage("usage", samples=0)
    assert field_bytes < exact < 2 * field_bytes, (field_bytes, exact)
    estimated = r.memory_usage("usage")
    # Five buckets of about thirty fields each: a standard error near 8% (the salt is random per
    # server), so these bounds are five of them away.
    assert 0.6 * exact < estimated < 1.4 * exact, (exact, estimated)
    r.set("small", "x" * 100)
    assert 100 < r.memory_usage("small") < r.memory_usage("usage")
    assert r.memory_usage("missing") is None
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("MEMORY", "USAGE", "usage", "SAMPLES", "-1")


def test_expiry_beyond_the_limit_is_refused(r):
    r.set("k", "v")
    assert r.pexpireat("k", EXPIRY_UNIX_MS_MAX) is True
    assert r.pexpiretime("k") == EXPIRY_UNIX_MS_MAX
    assert r.expireat("k", EXPIRY_UNIX_MS_MAX // 1000) is True
    refused = [
        (lambda: r.pexpireat("k", EXPIRY_UNIX_MS_MAX + 1), "pexpireat"),
        (lambda: r.expireat("k", EXPIRY_UNIX_MS_MAX // 1000 + 1), "expireat"),
        (lambda: r.expire("k", EXPIRY_UNIX_MS_MAX // 1000), "expire"),
        (lambda: r.set("k", "v", pxat=EXPIRY_UNIX_MS_MAX + 1), "set"),
        (lambda: r.set("k", "v", exat=EXPIRY_UNIX_MS_MAX // 1000 + 1), "set"),
        (lambda: r.getex("k", pxat=EXPIRY_UNIX_MS_MAX + 1), "getex"),
    ]
    for command, name in refused:
        with pytest.raises(redis.ResponseError, match=f"invalid expire time in '{name}' command"):
            command()
    assert r.get("k") == "v"
    assert r.expiretime("k") == EXPIRY_UNIX_MS_MAX // 1000
    r.set("k", "v", pxat=EXPIRY_UNIX_MS_MAX)
    assert r.pexpiretime("k") == EXPIRY_UNIX_MS_MAX
    assert r.dbsize() == 1 and r.keys("*") == ["k"]


def test_pipelined_hsets_and_sadds_answer_as_redis_whatever_else_touches_their_key(pair):
    # Pipelined single-key writes run in groups sharing one transaction (hashes are not kept
    # open between them, but a read in the group must still see every earlier write). Hashes
    # grow past 8 KiB (buckets) and shrink back.
    random = __import__("random").Random(47)
    both(pair, lambda client: client.flushdb())
    hashes, sets = ["h1", "h2"], ["s1", "s2"]

    def field():
        return f"f{random.randrange(400)}"

    def member():
        return str(random.randrange(40)) if random.random() < 0.5 else f"m{random.randrange(600)}"

    def next_command():
        key = random.choice(hashes + sets)
        if random.random() < 0.01:
            return random.choice([["DEL", key], ["SET", key, "string"], ["EXPIRE", key, "1000"]])
        if key in hashes and random.random() < 0.6:
            pairs = [word for _ in range(random.choice((1, 1, 3))) for word in (field(), "v" * random.choice((1, 150)))]
            return random.choice([["HSET", key, *pairs], ["HMSET", key, *pairs]])
        if key in sets and random.random() < 0.6:
            return ["SADD", key, *[member() for _ in range(random.choice((1, 1, 3)))]]
        others = (
            ["HGET", key, field()], ["HLEN", key], ["HDEL", key, field()], ["HGETALL", key], ["HEXISTS", key, field()],
            ["HINCRBY", key, field(), "1"], ["HSETNX", key, field(), "x"], ["SADD", random.choice(hashes), "x"], ["HSET", random.choice(sets), "f", "v"],
            ["SMEMBERS", key], ["SCARD", key], ["SISMEMBER", key, member()], ["SREM", key, member()], ["TTL", key], ["TYPE", key], ["LPUSH", key, "x"],
        )
        return random.choice(others)

    largest = compare_random_pipelines(pair, next_command, random, 80, measured_keys=hashes)
    assert largest > 12288, f"the largest hash took {largest} bytes: none grew past 8 KiB into buckets"
    assert_same(pair, lambda client: [(client.type(key), client.ttl(key)) for key in hashes + sets])
    assert_same(pair, lambda client: [client.hgetall(key) if client.type(key) == "hash" else None for key in hashes])
    assert_same(pair, lambda client: [client.smembers(key) if client.type(key) == "set" else None for key in sets])
