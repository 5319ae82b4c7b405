"""HyperLogLog (PFADD, PFCOUNT, PFMERGE): values byte for byte as Redis 7.0 keeps them, sparse and
dense, so that GET, DUMP and RESTORE move them between hybridkv and Redis and PFCOUNT answers the
same numbers. Replies and errors of each command are compared in test_compare_redis.py
("hyperloglog")."""

import random

import pytest
import redis


def answer(client, command):
    try:
        return client.execute_command(*command)
    except redis.ResponseError as error:
        return ("error", str(error))


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
            lengths.add(len(theirs))
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


def test_pfcount_caches_the_cardinality_and_aborts_a_watch_as_redis_does(binary_pair, shared_server, reference_redis):
    outcomes = []
    for client, port in zip(binary_pair, (shared_server.port, reference_redis)):
        client.pfadd("watched", "a", "b", "c")
        other = redis.Redis(port=port)
        results = []
        for _ in range(2):
            pipe = client.pipeline(transaction=True)
            pipe.watch("watched")
            other.pfcount("watched")  # the first computes and caches (a write); the second reads the cache
            pipe.multi()
            pipe.get("watched")
            try:
                results.append(pipe.execute())
            except redis.WatchError:
                results.append("aborted")
        outcomes.append(results)
        other.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "aborted" and outcomes[0][1] != "aborted"


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
