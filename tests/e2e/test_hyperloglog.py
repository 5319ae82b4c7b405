"""HyperLogLog (PFADD, PFCOUNT, PFMERGE): values byte for byte as Redis 7.0 keeps them, sparse and
dense (but for the cardinality cache, which hybridkv's PFCOUNT does not write back), so that GET,
DUMP and RESTORE move them between hybridkv and Redis and PFCOUNT answers the same numbers. Replies and errors of each command are compared in test_compare_redis.py
("hyperloglog")."""

import random

import pytest
import redis


CACHED_CARDINALITY = slice(8, 16)


def answer(client, command):
    """The reply; of GET, the value without its cached cardinality (Redis's PFCOUNT writes it
    back into the value, hybridkv's leaves it marked stale: PFCOUNT stays a read here)."""
    try:
        reply = client.execute_command(*command)
    except redis.ResponseError as error:
        return ("error", str(error))
    if command[0] == "GET" and isinstance(reply, bytes) and reply.startswith(b"HYLL"):
        return reply[:CACHED_CARDINALITY.start] + reply[CACHED_CARDINALITY.stop:]
    return reply


@pytest.mark.parametrize("seed", [1, 2])
def test_random_commands_leave_the_same_bytes_as_redis_sparse_and_dense(binary_pair, seed):
    rng = random.Random(seed)
    lengths = set()
    # Small HLLs stay sparse; a few grow past 3,000 sparse bytes and turn dense.
    for step in range(1500):
        key = f"h{rng.randrange(12)}"
        choice = rng.random()
        if choice < 0.5:
            spread = 200_000 if key in ("h0", "h1") else 2_000
            command = ["PFADD", key, *[f"e{rng.randrange(spread)}" for _ in range(rng.randrange(0, 30))]]
        elif choice < 0.65:
            command = ["PFCOUNT", *[f"h{rng.randrange(13)}" for _ in range(rng.randrange(1, 4))]]
        elif choice < 0.75:
            command = ["PFMERGE", f"h{rng.randrange(13)}", *[f"h{rng.randrange(13)}" for _ in range(rng.randrange(0, 3))]]
        else:
            command = ["GET", key]
        ours, theirs = (answer(client, command) for client in binary_pair)
        assert ours == theirs, f"step {step}: {command[:4]}"
        if command[0] == "GET" and isinstance(theirs, bytes):
            lengths.add(len(theirs) + CACHED_CARDINALITY.stop - CACHED_CARDINALITY.start)
    assert 12304 in lengths and any(length < 3000 for length in lengths), "both encodings were compared"


def test_dump_and_restore_move_hyperloglogs_between_hybridkv_and_redis(binary_pair):
    ours, theirs = binary_pair
    for client in binary_pair:
        client.pfadd("sparse", *[f"s{number}" for number in range(50)])
        client.pfadd("dense", *[f"d{number}" for number in range(5000)])
    for source, target in ((theirs, ours), (ours, theirs)):
        for key in ("sparse", "dense"):
            target.restore(f"{key}-copy", 0, source.dump(key), replace=True)
            assert target.get(f"{key}-copy") == source.get(key)
            assert target.pfcount(f"{key}-copy") == source.pfcount(key)


def test_only_a_pfadd_or_pfmerge_that_changes_a_register_aborts_a_watch(shared_server):
    client = shared_server.client()
    other = shared_server.client()
    client.pfadd("watched", "a", "b", "c")
    outcomes = []
    for change in (lambda: other.pfcount("watched"), lambda: other.pfadd("watched", "a"), lambda: other.pfadd("watched", "new")):
        pipe = client.pipeline(transaction=True)
        pipe.watch("watched")
        change()
        pipe.multi()
        pipe.pfcount("watched")
        try:
            outcomes.append(pipe.execute())
        except redis.WatchError:
            outcomes.append("aborted")
    # Redis's PFCOUNT writes its cached cardinality back and aborts the first; here it is a read.
    assert outcomes == [[3], [3], "aborted"]
    client.close()
    other.close()


def test_pfadd_and_pfmerge_announce_pfadd(shared_server):
    client = shared_server.client(decode_responses=True)
    client.config_set("notify-keyspace-events", "K$")
    pubsub = client.pubsub()
    pubsub.psubscribe("__keyspace@0__:hll*")
    assert pubsub.get_message(timeout=1)["type"] == "psubscribe"
    client.pfadd("hll1", "x")
    client.pfadd("hll1", "x")  # changes nothing: no event
    client.pfmerge("hll2", "hll1")
    client.pfcount("hll2")  # caches the cardinality: no event
    events = []
    while (message := pubsub.get_message(timeout=0.3)) is not None:
        events.append((message["channel"], message["data"]))
    assert events == [("__keyspace@0__:hll1", "pfadd"), ("__keyspace@0__:hll2", "pfadd")]
    client.config_set("notify-keyspace-events", "")
    pubsub.close()
    client.close()
