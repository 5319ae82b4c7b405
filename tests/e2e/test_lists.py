"""Lists, small (one record) and big (a root record plus chunks): the list commands against
hybridkv and redis-server give the same answers whatever the list's size, the chunks are never
keys, WATCH sees list writes, a list survives restarts and crashes whole, and the blocking pops
wait for a push, time out, and end with CLIENT UNBLOCK or a client that leaves. Replies and errors
of small lists are compared one by one in test_compare_redis.py ("lists"), their keyspace
events in test_keyspace_events.py."""

import concurrent.futures
import time

import pytest
import redis

from conftest import RawClient, assert_same, assert_watch_sees, blocked_clients, both, compare_random_pipelines, pipelined_replies, wait_until

ELEMENTS = 20_000


def fill(client, key, elements, command="rpush"):
    pipe = client.pipeline(transaction=False)
    for number, element in enumerate(elements):
        getattr(pipe, command)(key, element)
        if number % 1000 == 999:
            pipe.execute()
    pipe.execute()


def test_a_big_list_answers_as_redis_through_pushes_pops_and_edits(pair):
    both(pair, lambda client: fill(client, "big", (f"element:{number}" for number in range(ELEMENTS))))
    both(pair, lambda client: fill(client, "big", (f"head:{number}" for number in range(3000)), "lpush"))
    both(pair, lambda client: client.rpush("bulk", *[f"b{number % 97}" for number in range(30_000)]))
    assert_same(pair, lambda client: (client.llen("big"), client.type("big"), client.object("encoding", "big"), client.dbsize()))
    assert_same(pair, lambda client: client.lrange("big", 0, -1))
    assert_same(pair, lambda client: [client.lindex("big", index) for index in (0, 1, 2999, 3000, 12_345, -1, -23_000, 23_000)])
    assert_same(pair, lambda client: [client.lrange("big", start, stop) for start, stop in ((2990, 3010), (-5, -1), (100, 50), (22_990, 30_000))])
    assert_same(pair, lambda client: [client.lset("big", index, f"set:{index}") for index in (0, 5000, -1)])
    assert_same(pair, lambda client: (client.linsert("big", "BEFORE", "element:10000", "x" * 5000), client.linsert("big", "AFTER", "set:-1", "tail")))
    assert_same(pair, lambda client: (client.lrem("bulk", 100, "b5"), client.lrem("bulk", -50, "b6"), client.lrem("bulk", 0, "b7")))
    assert_same(pair, lambda client: client.lrange("bulk", 0, -1))
    assert_same(pair, lambda client: [client.lpos("bulk", "b8", rank=rank, count=count) for rank, count in ((1, 0), (-3, 5), (10, None))])
    assert_same(pair, lambda client: (client.lpop("big", 2500), client.rpop("big", 2500), client.llen("big")))
    assert_same(pair, lambda client: (client.ltrim("big", 1000, -1000), client.llen("big"), client.lrange("big", 0, 10), client.lrange("big", -10, -1)))
    assert_same(pair, lambda client: [client.lmove("big", "moved", "LEFT", "RIGHT") for _ in range(500)])
    assert_same(pair, lambda client: (client.lmpop(2, "none", "big", direction="RIGHT", count=300), client.lrange("moved", 0, -1)))
    assert_same(pair, lambda client: client.lrange("big", 0, -1))
    assert_same(pair, lambda client: (client.ltrim("big", 0, 99), client.lrange("big", 0, -1), client.object("encoding", "big")))
    assert_same(pair, lambda client: sorted(client.keys("*")))
    assert_same(pair, lambda client: sorted(client.scan_iter(_type="list")))


def test_pipelined_pushes_and_pops_answer_as_redis_whatever_else_touches_their_list(pair):
    # A pipelined group keeps a pushed or popped list open for its next push or pop on that
    # key; every other command on the key (a write in the same group, or a read after it) must
    # see the list as written, so batches mix them at random, on lists big enough for chunks.
    random = __import__("random").Random(46)
    both(pair, lambda client: client.flushdb())
    keys = ["q1", "q2"]

    def element():
        return f"{random.randrange(1000)}:" + "e" * random.choice((5, 300, 2000))

    def next_command():
        key = random.choice(keys)
        pick = random.random()
        if pick < 0.30:
            return (random.choice(("LPUSH", "RPUSH")), key, *[element() for _ in range(random.choice((1, 1, 3)))])
        if pick < 0.50:
            return (random.choice(("LPOP", "RPOP")), key, *random.choice(((), ("1",), ("0",), ("40",))))
        if pick < 0.55:
            return (random.choice(("LPUSHX", "RPUSHX")), key, element())
        others = (
            ("EXPIRE", key, "1000"), ("PERSIST", key), ("LSET", key, str(random.randrange(-50, 50)), "set"),
            ("LINSERT", key, "BEFORE", "set", "inserted"), ("LREM", key, "2", "set"), ("LTRIM", key, "0", str(random.randrange(50, 3000))),
            ("APPEND", key, "x"), ("LLEN", key), ("LRANGE", key, "0", "3"), ("LINDEX", key, "-1"), ("TYPE", key), ("TTL", key),
            ("DEL", key), ("SET", key, "a string"), ("LMOVE", key, random.choice(keys), "LEFT", "RIGHT"),
        )
        return random.choice(others)

    compare_random_pipelines(pair, next_command, random, 60)
    assert_same(pair, lambda client: [(client.type(key), client.ttl(key)) for key in keys])
    assert_same(pair, lambda client: [client.lrange(key, 0, -1) if client.type(key) == "list" else client.get(key) for key in keys])


def test_pipelined_pushes_past_the_part_limit_each_answer_as_alone(small_blocks_server):
    # The pushes of a pipelined group save their list once, at the group's end; when that save
    # is over the list's part limit, the group runs again one command at a time, so each push
    # answers what it would have answered alone: every push up to the limit is acknowledged
    # with the list's new length and is in the list, every later one fails. (Where exactly the
    # limit falls depends on how the chunks were cut, which depends on the groups' sizes.)
    client = small_blocks_server.client(decode_responses=True)
    padding = "x" * 1000
    replies = pipelined_replies(client, [("RPUSH", "pipelined", f"{number}:{padding}") for number in range(1200)])
    acknowledged = sum(1 for reply in replies if isinstance(reply, int))
    assert 900 < acknowledged < 1100
    assert replies[:acknowledged] == list(range(1, acknowledged + 1))
    refusal = "error: list would need 256 parts (chunks of at most 4096 bytes and their directories), over the limit of 255 parts for one list"
    assert replies[acknowledged:] == [refusal] * (1200 - acknowledged)
    assert client.lrange("pipelined", 0, -1) == [f"{number}:{padding}" for number in range(acknowledged)]


def test_a_queue_passing_through_a_big_list_keeps_every_element_in_order(r):
    fill(r, "queue", (str(number) for number in range(5000)))
    taken = []
    for number in range(5000, 40_000, 7):
        r.rpush("queue", *[str(value) for value in range(number, number + 7)])
        taken.extend(r.lpop("queue", 7))
    taken.extend(r.lpop("queue", 100_000) or [])
    assert taken == [str(number) for number in range(len(taken))]
    assert r.exists("queue") == 0


def test_watch_sees_list_writes(shared_server):
    client = shared_server.client(decode_responses=True)
    other = shared_server.client(decode_responses=True)
    client.delete("watched")
    fill(client, "watched", (f"e{number}" for number in range(3000)))
    writes = [
        (lambda: other.lrem("watched", 0, "absent"), False),
        (lambda: other.linsert("watched", "BEFORE", "absent", "x"), False),
        (lambda: other.rpush("watched", "new"), True),
        (lambda: other.lpop("watched"), True),
        (lambda: other.lset("watched", 1500, "changed"), True),
        (lambda: other.ltrim("watched", 0, -1), True),
    ]
    assert_watch_sees(client, other, "watched", writes, lambda pipe, key: pipe.llen(key))
    client.close()
    other.close()


def test_a_big_list_survives_restart_and_crash(make_server):
    server = make_server()
    client = server.client(decode_responses=True)
    fill(client, "big", (f"element:{number}" for number in range(ELEMENTS)))
    client.rpush("small", "x", "1")
    expected = client.lrange("big", 0, -1)
    server.restart()
    client = server.client(decode_responses=True)
    assert client.lrange("big", 0, -1) == expected and client.lrange("small", 0, -1) == ["x", "1"]
    client.lpush("big", "after")
    client.lrem("big", 1, "element:7")
    client.lmove("big", "moved", "RIGHT", "LEFT")
    expected = client.lrange("big", 0, -1)
    server.kill9()
    server.start()
    client = server.client(decode_responses=True)
    assert client.lrange("big", 0, -1) == expected
    assert sorted(client.keys("*")) == ["big", "moved", "small"]
    assert client.type("big") == "list" and client.dbsize() == 3


def test_list_size_limit_is_a_clear_error(small_blocks_server):
    # 64 KiB write blocks allow 255 parts per key and 32 KiB values: about 1 MiB in one list.
    server = small_blocks_server
    client = server.client(decode_responses=True)
    padding = "x" * 1000
    with pytest.raises(redis.ResponseError, match=r"^list would need [0-9]+ parts \(chunks of at most [0-9]+ bytes and their directories\), over the limit of 255 parts for one list$"):
        for number in range(5000):
            client.rpush("huge", f"{number}:{padding}")
    length = client.llen("huge")
    assert 900 < length < 1100
    assert client.lindex("huge", -1) == f"{length - 1}:{padding}"
    assert client.lpop("huge") == f"0:{padding}"
    assert client.delete("huge") == 1 and client.dbsize() == 0


def test_a_blocked_pop_is_served_by_a_later_push_and_times_out_otherwise(shared_server):
    waiter = shared_server.client(decode_responses=True)
    pusher = shared_server.client(decode_responses=True)
    pusher.delete("jobs", "other", "moved")
    started = time.monotonic()
    assert waiter.blpop(["jobs", "other"], timeout=0.2) is None
    assert time.monotonic() - started >= 0.2
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        served = pool.submit(waiter.brpop, ["jobs", "other"], 10)
        wait_until(lambda: blocked_clients(pusher) == 1)
        assert [client["flags"] for client in pusher.client_list() if client["cmd"] == "brpop"] == ["b"]
        pusher.set("unrelated", "x")
        pusher.rpush("other", "first", "second")
        assert served.result(timeout=5) == ("other", "second")
        served = pool.submit(waiter.blmove, "jobs", "moved", 10, "LEFT", "RIGHT")
        wait_until(lambda: blocked_clients(pusher) == 1)
        pusher.lpush("jobs", "job")
        assert served.result(timeout=5) == "job" and pusher.lrange("moved", 0, -1) == ["job"]
        served = pool.submit(waiter.blmpop, 10, 2, "jobs", "other", direction="LEFT", count=5)
        wait_until(lambda: blocked_clients(pusher) == 0)
        assert served.result(timeout=5) == ["other", ["first"]]
    assert blocked_clients(pusher) == 0
    assert pusher.exists("jobs", "other") == 0
    waiter.close()
    pusher.close()


def test_each_element_pushed_goes_to_exactly_one_of_many_blocked_clients(shared_server):
    pusher = shared_server.client(decode_responses=True)
    pusher.delete("work")
    waiters = [shared_server.client(decode_responses=True) for _ in range(6)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(waiters)) as pool:
        pops = [pool.submit(waiter.blpop, ["work"], 10) for waiter in waiters]
        wait_until(lambda: blocked_clients(pusher) == len(waiters))
        for number in range(len(waiters)):
            pusher.rpush("work", f"item{number}")
        served = sorted(pop.result(timeout=10)[1] for pop in pops)
    assert served == [f"item{number}" for number in range(len(waiters))]
    assert pusher.exists("work") == 0 and blocked_clients(pusher) == 0
    for waiter in waiters:
        waiter.close()
    pusher.close()


def served_in_turn(client, block, push):
    """Three raw clients run `block` one after the other (each blocked before the next starts);
    one element is pushed, then two: what each client received after each push."""
    port = client.connection_pool.connection_kwargs["port"]
    waiters = []
    for number in range(3):
        waiters.append(RawClient(port))
        waiters[-1].send(*block)
        wait_until(lambda: blocked_clients(client) == number + 1)
    push(client, ["first"])
    after_one = [waiter.read() for waiter in waiters]
    push(client, ["second", "third"])
    after_three = [waiter.read() for waiter in waiters]
    for waiter in waiters:
        waiter.close()
    return after_one, after_three, blocked_clients(client)


@pytest.mark.parametrize(
    "block, push",
    [
        (["BLPOP", "fifo", "0"], lambda client, elements: client.rpush("fifo", *elements)),
        (["BLMOVE", "fifo", "moved", "LEFT", "RIGHT", "0"], lambda client, elements: client.rpush("fifo", *elements)),
        (["BZPOPMIN", "fifo", "0"], lambda client, elements: client.zadd("fifo", {element: number for number, element in enumerate(elements)})),
    ],
    ids=["blpop", "blmove", "bzpopmin"],
)
def test_blocked_clients_are_served_in_the_order_they_blocked_as_in_redis(pair, block, push):
    ours, theirs = both(pair, lambda client: served_in_turn(client, block, push))
    assert ours == theirs
    after_one, after_three, still_blocked = ours
    assert after_one[0] and not after_one[1] and not after_one[2], "the first to block is served first"
    assert not after_three[0] and after_three[1] and after_three[2] and still_blocked == 0


def test_a_blocked_pop_is_counted_and_monitored_once_however_often_it_looks_again(shared_server):
    r = shared_server.client(decode_responses=True)
    r.delete("once")
    r.config_resetstat()
    monitor = RawClient(shared_server.port)
    assert monitor.exchange("MONITOR") == b"+OK\r\n"
    waiter = RawClient(shared_server.port)
    waiter.send("BLPOP", "once", "0")
    wait_until(lambda: blocked_clients(r) == 1)
    processed_before = r.info("stats")["total_commands_processed"]
    for _ in range(3):
        # A write to the key wakes the waiter, which finds the list empty again and waits on.
        pipe = r.pipeline(transaction=True)
        pipe.rpush("once", "taken").lpop("once").execute()
        time.sleep(0.1)
        assert blocked_clients(r) == 1
    r.rpush("once", "served")
    assert waiter.read() == b"*2\r\n$4\r\nonce\r\n$6\r\nserved\r\n"
    assert r.info("commandstats")["cmdstat_blpop"]["calls"] == 1
    # MULTI, RPUSH, LPOP, EXEC and INFO three times, then RPUSH and two INFOs (this one counts
    # itself): nothing for BLPOP's looks.
    assert r.info("stats")["total_commands_processed"] - processed_before == 3 * 5 + 3
    assert monitor.read().count(b'"BLPOP"') == 1
    waiter.close()
    monitor.close()


def test_a_blocked_client_that_leaves_or_is_unblocked_frees_its_wait(shared_server):
    watcher = shared_server.client(decode_responses=True)
    watcher.delete("never")
    leaving = RawClient(shared_server.port)
    leaving.send("BLPOP", "never", "0")
    wait_until(lambda: blocked_clients(watcher) == 1)
    leaving.close()
    wait_until(lambda: blocked_clients(watcher) == 0)
    staying = RawClient(shared_server.port)
    staying.send("BRPOP", "never", "0")
    wait_until(lambda: blocked_clients(watcher) == 1)
    blocked_id = next(int(client["id"]) for client in watcher.client_list() if client["cmd"] == "brpop")
    assert watcher.client_unblock(blocked_id) == 1
    assert staying.read() == b"*-1\r\n"
    staying.send("BLPOP", "never", "0")
    wait_until(lambda: blocked_clients(watcher) == 1)
    assert watcher.client_unblock(blocked_id, error=True) == 1
    assert staying.read() == b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    # The element pushed now is not taken by the clients that stopped waiting.
    watcher.rpush("never", "kept")
    assert watcher.lrange("never", 0, -1) == ["kept"]
    staying.close()
    watcher.close()
