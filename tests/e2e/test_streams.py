"""Streams, small and big (the key's record over a list of entries in its parts), and their
consumer groups (a record each): the stream commands against hybridkv and redis-server give the
same answers whatever the stream's size, XREAD and XREADGROUP block until an XADD and end as
Redis ends them, and streams with their groups and pending entries survive restarts and crashes.
Replies and errors of small streams are compared one by one in test_compare_redis.py ("streams",
"stream groups"), their keyspace events in test_keyspace_events.py."""

import concurrent.futures

import redis

from conftest import RawClient, assert_same, blocked_clients, both, in_pipelined_batches, pipelined_replies, wait_until

ENTRIES = 20_000


def fill(client, key, count, first_ms=1):
    in_pipelined_batches(client, range(count), lambda pipe, number: pipe.xadd(key, {"n": number, "pad": "p" * (number % 200)}, id=f"{first_ms + number // 3}-{number % 3}"))


def without_times(reply):
    """A reply with its times in milliseconds (idle, delivery and seen times) blanked out."""
    if isinstance(reply, list):
        return [without_times(item) for item in reply]
    if isinstance(reply, dict):
        return {key: "time" if key in ("idle", "seen-time", "time_since_delivered") else without_times(value) for key, value in reply.items()}
    return reply


def stream_info(client, key):
    """XINFO STREAM less the radix tree's counts, which are Redis's own structure's."""
    info = client.xinfo_stream(key)
    return {name: value for name, value in info.items() if not name.startswith("radix-tree")}


def test_a_big_stream_answers_as_redis_through_adds_deletes_trims_and_ranges(pair):
    both(pair, lambda client: fill(client, "big", ENTRIES))
    assert_same(pair, lambda client: (client.xlen("big"), client.type("big"), client.object("encoding", "big"), stream_info(client, "big")))
    assert_same(pair, lambda client: client.xrange("big"))
    assert_same(pair, lambda client: [client.xrange("big", start, end, count) for start, end, count in (("100", "200-1", None), ("(3000-2", "+", 5), ("-", "(1-1", None), ("5000", "4000", None))])
    assert_same(pair, lambda client: [client.xrevrange("big", end, start, count) for end, start, count in (("+", "-", 7), ("4000", "3990", None), ("(6000-0", "5999", None))])
    assert_same(pair, lambda client: client.xread({"big": "6666-1"}, count=50))
    assert_same(pair, lambda client: client.xdel("big", *[f"{ms}-{seq}" for ms in range(1, 6000, 97) for seq in (0, 2)], "99999-0"))
    assert_same(pair, lambda client: (client.xlen("big"), stream_info(client, "big"), client.xrange("big", "1", "300")))
    assert_same(pair, lambda client: (client.xtrim("big", maxlen=15_000, approximate=False), client.xtrim("big", minid="2500-1", approximate=False), client.xlen("big")))
    assert_same(pair, lambda client: (client.xadd("big", {"last": "1"}, id="9999-0", maxlen=12_000, approximate=False), stream_info(client, "big")))
    assert_same(pair, lambda client: client.xrange("big"))
    assert_same(pair, lambda client: (client.execute_command("XSETID", "big", "20000-0", "ENTRIESADDED", "30000", "MAXDELETEDID", "10000-0"), stream_info(client, "big")))
    assert_same(pair, lambda client: (client.xtrim("big", maxlen=0, approximate=False), stream_info(client, "big"), client.exists("big")))


def test_pipelined_xadds_answer_as_redis_whatever_else_touches_their_stream(pair):
    # A pipelined group keeps a stream open from one XADD to the next; every other command on
    # the key must see the stream as written, so batches mix them at random, on streams big
    # enough for chunks. IDs are explicit (a `*` ID is the server's clock), some too small.
    random = __import__("random").Random(46)
    both(pair, lambda client: client.flushdb())
    keys, next_ms = ["s1", "s2"], {"s1": 1, "s2": 1}

    def xadd(key):
        if random.random() < 0.05:
            entry_id = "1-1"
        else:
            next_ms[key] += random.randrange(1, 3)
            entry_id = f"{next_ms[key]}-{random.randrange(3)}"
        trim = random.choice([[], [], ["MAXLEN", "500"], ["MAXLEN", "~", "200"], ["NOMKSTREAM"]])
        return ["XADD", key, *trim, entry_id, "field", "v" * random.choice((3, 200))]

    def next_command():
        key = random.choice(keys)
        if random.random() < 0.6:
            return xadd(key)
        others = (
            ["XLEN", key], ["XRANGE", key, "-", "+", "COUNT", "3"], ["XREVRANGE", key, "+", "-", "COUNT", "2"],
            ["XDEL", key, f"{next_ms[key]}-0"], ["XTRIM", key, "MAXLEN", "300"], ["DEL", key], ["SET", key, "string"],
            ["EXPIRE", key, "1000"], ["TTL", key], ["TYPE", key], ["XGROUP", "CREATE", key, "g", "0"],
            ["XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", key, ">"], ["XACK", key, "g", f"{next_ms[key]}-0"],
            ["XINFO", "GROUPS", key], ["LPUSH", key, "x"],
        )
        return random.choice(others)

    for _ in range(60):
        batch = [next_command() for _ in range(random.randrange(1, 80))]
        assert_same(pair, lambda client: pipelined_replies(client, batch))
        for key in keys:
            if random.random() < 0.05:
                next_ms[key] = 1  # a key deleted or replaced starts again from small IDs
    assert_same(pair, lambda client: [(client.type(key), client.ttl(key)) for key in keys])
    assert_same(pair, lambda client: [client.xrange(key) if client.type(key) == "stream" else None for key in keys])


def test_an_approximate_trim_keeps_at_least_what_it_was_asked_to_and_trims_whole_chunks(r):
    fill(r, "approx", ENTRIES)
    removed = r.xtrim("approx", maxlen=12_000, approximate=True)
    assert 0 < removed <= 8000 and r.xlen("approx") == ENTRIES - removed
    first = r.xrange("approx", count=1)[0][0]
    assert first == f"{1 + removed // 3}-{removed % 3}"
    assert r.xtrim("approx", maxlen=0, approximate=True, limit=10) <= 10
    kept = len(r.xrange("approx", "6000", "+"))
    length = r.xlen("approx")
    assert r.xtrim("approx", minid="6000", approximate=False) == length - kept
    assert r.xlen("approx") == kept and r.xrange("approx", count=1)[0][0] == "6000-0"
    assert r.xadd("approx", {"x": "y"}, maxlen=100, approximate=True) and r.xlen("approx") >= 100


def read_as_group(client, key):
    """Three consumers read a big stream as one group, acknowledge some, claim others: what
    each step answered (times blanked)."""
    client.xgroup_create(key, "workers", id="0")
    client.xgroup_create(key, "audit", id="$")
    replies = []
    for turn in range(30):
        replies.append(client.xreadgroup("workers", f"c{turn % 3}", {key: ">"}, count=100))
        entries = replies[-1][0][1] if replies[-1] else []
        client.xack(key, "workers", *[entry_id for entry_id, _ in entries[::2]])
    replies.append(client.xpending(key, "workers"))
    replies.append(without_times(client.xpending_range(key, "workers", "-", "+", 20, consumername="c1")))
    replies.append(client.xclaim(key, "workers", "c9", 0, [f"{ms}-0" for ms in range(3, 300, 11)], justid=True))
    replies.append(client.xautoclaim(key, "workers", "c8", 0, "0", count=25))
    replies.append(client.xreadgroup("workers", "c1", {key: "0"}, count=10))
    client.xdel(key, "600-0", "601-1")
    replies.append(client.xreadgroup("workers", "c0", {key: "595"}, count=20))
    replies.append(without_times(client.xinfo_groups(key)))
    replies.append(without_times(client.xinfo_consumers(key, "workers")))
    replies.append(client.xgroup_delconsumer(key, "workers", "c2"))
    replies.append(client.xpending(key, "workers"))
    return replies


def test_consumer_groups_on_a_big_stream_answer_as_redis(pair):
    both(pair, lambda client: fill(client, "jobs", ENTRIES))
    ours, theirs = both(pair, lambda client: read_as_group(client, "jobs"))
    for step, (mine, redis_reply) in enumerate(zip(ours, theirs)):
        assert mine == redis_reply, f"step {step}"


def test_xread_block_is_served_by_xadd_and_times_out_otherwise(shared_server):
    adder = shared_server.client()
    adder.delete("events", "other")
    readers = [shared_server.client() for _ in range(3)]
    assert readers[0].xread({"events": "$"}, block=100) == []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(readers)) as pool:
        reads = [pool.submit(reader.xread, {"other": "$", "events": "$"}, None, 10_000) for reader in readers]
        wait_until(lambda: blocked_clients(adder) == len(readers))
        adder.set("unrelated", "x")
        new_id = adder.xadd("events", {"kind": "first"})
        served = [read.result(timeout=10) for read in reads]
    assert served == [[["events", [(new_id, {"kind": "first"})]]]] * len(readers)
    # `$` stood for the last ID when the command first ran: an entry added while the reader
    # waited is not skipped when it looks again.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        read = pool.submit(readers[0].xread, {"events": "$"}, None, 10_000)
        wait_until(lambda: blocked_clients(adder) == 1)
        ids = [adder.xadd("events", {"n": number}) for number in range(2)]
        assert [entry_id for entry_id, _ in read.result(timeout=10)[0][1]] in (ids, ids[:1])
    assert blocked_clients(adder) == 0
    for client in readers + [adder]:
        client.close()


def test_each_new_entry_goes_to_one_consumer_of_a_group_blocked_on_it(shared_server):
    adder = shared_server.client()
    adder.delete("work")
    adder.xgroup_create("work", "g", id="$", mkstream=True)
    consumers = [shared_server.client() for _ in range(4)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(consumers)) as pool:
        reads = [pool.submit(consumer.xreadgroup, "g", f"c{number}", {"work": ">"}, 1, 10_000) for number, consumer in enumerate(consumers)]
        wait_until(lambda: blocked_clients(adder) == len(consumers))
        added = [adder.xadd("work", {"n": number}) for number in range(len(consumers))]
        served = [read.result(timeout=10)[0][1][0][0] for read in reads]
    assert sorted(served) == sorted(added)
    assert adder.xpending("work", "g")["pending"] == len(consumers)
    for client in consumers + [adder]:
        client.close()


def blocked_reader_ends(client, end):
    """A raw client blocks in XREADGROUP; `end` ends its group or key: what it received."""
    client.delete("ending")
    client.xgroup_create("ending", "g", id="$", mkstream=True)
    reader = RawClient(client.connection_pool.connection_kwargs["port"])
    reader.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "ending", ">")
    wait_until(lambda: blocked_clients(client) == 1)
    end(client)
    reply = reader.read()
    reader.close()
    return reply


def test_a_blocked_xreadgroup_ends_when_its_group_or_key_goes_as_in_redis(pair):
    for end in (lambda client: client.xgroup_destroy("ending", "g"), lambda client: client.delete("ending"), lambda client: client.set("ending", "x")):
        assert_same(pair, lambda client: blocked_reader_ends(client, end))


def test_streams_and_their_groups_survive_restart_and_crash(make_server):
    server = make_server()
    client = server.client()
    fill(client, "log", ENTRIES)
    client.xgroup_create("log", "g", id="0")
    client.xgroup_create("log", "h", id="5000")
    client.xreadgroup("g", "alice", {"log": ">"}, count=500)
    client.xreadgroup("h", "bob", {"log": ">"}, count=20, noack=True)
    client.xadd("small", {"a": "1"}, id="1-1")

    def state():
        return (client.xrange("log"), without_times(client.xinfo_stream("log", full=True)), client.xpending("log", "g"), client.xrange("small"), sorted(client.keys("*")))

    expected = state()
    server.restart()
    client = server.client()
    assert state() == expected
    client.xack("log", "g", *[f"{ms}-0" for ms in range(1, 100)])
    client.xgroup_destroy("log", "h")
    client.xtrim("log", maxlen=10_000, approximate=False)
    expected = state()
    server.kill9()
    server.start()
    client = server.client()
    assert state() == expected
    assert client.type("log") == "stream" and client.dbsize() == 2


def test_a_consumer_group_past_the_value_limit_is_refused_whole(small_blocks_server):
    client = small_blocks_server.client()
    fill(client, "s", 3000)
    client.xgroup_create("s", "g", id="0")
    # 36 bytes per pending entry: 3000 of them pass the 32 KiB values of this namespace.
    try:
        client.xreadgroup("g", "c", {"s": ">"})
        raise AssertionError("the group's record cannot hold 3000 pending entries here")
    except redis.ResponseError as error:
        assert str(error).startswith("consumer group 'g' would take") and "3000 pending entries, over the limit of 32768 bytes" in str(error)
    assert client.xpending("s", "g")["pending"] == 0 and client.xinfo_groups("s")[0]["last-delivered-id"] == "0-0"
    assert len(client.xreadgroup("g", "c", {"s": ">"}, count=500)[0][1]) == 500


def test_memory_usage_counts_a_streams_entries_and_a_sorted_sets_order_index(r):
    fill(r, "measured", ENTRIES)
    r.zadd("ranked", {f"member:{number}:{'p' * 40}": number for number in range(ENTRIES)})
    entry_bytes = sum(len(f"{number}") + number % 200 + 20 for number in range(ENTRIES))
    exact, estimated = r.memory_usage("measured", samples=0), r.memory_usage("measured")
    assert entry_bytes < exact < 3 * entry_bytes and 0.5 * exact < estimated < 2 * exact
    member_bytes = ENTRIES * (len("member:10000:") + 40 + 8)
    assert r.memory_usage("ranked", samples=0) > 2 * member_bytes, "the hash and the order index both hold every member"
