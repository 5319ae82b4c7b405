"""Pub/Sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBEs, PUBLISH, SPUBLISH and PUBSUB,
byte for byte as redis-server sends them (RESP2 and RESP3), through redis-py's PubSub, and the
limit on a subscriber that stops reading."""

import socket
import threading
import time

import pytest
import redis

from conftest import RawClient, assert_same_replies, raw_exchange, run_script

# Steps of (client, command words); client "a" subscribes, "b" publishes and inspects. Names are
# chosen so that no reply depends on the order of a dictionary (one name per unordered list).
SCRIPT = [
    ("a", ["SUBSCRIBE", "news", "news"]), ("a", ["SUBSCRIBE"]), ("a", ["GET", "k"]), ("a", ["CONFIG", "GET", "maxclients"]),
    ("a", ["PING"]), ("a", ["PING", "hi"]), ("a", ["PING", "a", "b"]), ("a", ["PSUBSCRIBE", "n*", "zz*"]),
    ("b", ["PUBLISH", "news", "hello"]), ("a", []), ("b", ["PUBLISH", "other", "x"]), ("b", ["PUBLISH", "none", "x"]), ("a", []),
    ("b", ["PUBLISH", "news"]), ("b", ["PUBSUB", "NUMSUB", "news", "zz"]), ("b", ["PUBSUB", "NUMSUB"]), ("b", ["PUBSUB", "NUMPAT"]),
    ("b", ["PUBSUB", "CHANNELS"]), ("b", ["PUBSUB", "CHANNELS", "n?ws"]), ("b", ["PUBSUB", "CHANNELS", "x*"]),
    ("b", ["PUBSUB", "CHANNELS", "*", "extra"]), ("b", ["PUBSUB", "NUMPAT", "extra"]), ("b", ["PUBSUB", "NOSUCH"]),
    ("b", ["INFO", "stats"]), ("a", ["UNSUBSCRIBE", "zz"]), ("a", ["PUNSUBSCRIBE", "zz*"]), ("a", ["UNSUBSCRIBE"]),
    ("a", ["UNSUBSCRIBE"]), ("a", ["PUNSUBSCRIBE"]), ("a", ["PUNSUBSCRIBE"]), ("a", ["GET", "k"]), ("a", ["PING"]),
    ("a", ["SSUBSCRIBE", "shard"]), ("a", ["SUBSCRIBE", "news"]), ("b", ["SPUBLISH", "shard", "s1"]), ("b", ["SPUBLISH", "news", "s2"]),
    ("a", []), ("b", ["PUBSUB", "SHARDNUMSUB", "shard", "news"]), ("b", ["PUBSUB", "SHARDCHANNELS"]), ("b", ["PUBSUB", "SHARDCHANNELS", "z*"]),
    ("a", ["SUNSUBSCRIBE", "zz"]), ("a", ["SUNSUBSCRIBE"]), ("a", ["SUNSUBSCRIBE"]), ("a", ["MULTI"]), ("a", ["RESET"]),
    ("b", ["PUBSUB", "NUMSUB", "news"]), ("a", ["GET", "k"]),
    # RESP3: any command while subscribed, notices as pushes, a message to oneself before PUBLISH's reply.
    ("a", ["HELLO", "3"]), ("a", ["SUBSCRIBE", "news"]), ("a", ["SET", "k", "v"]), ("a", ["PUBLISH", "news", "me"]),
    ("a", ["PING"]), ("b", ["PUBLISH", "news", "you"]), ("a", []), ("a", ["UNSUBSCRIBE"]), ("a", ["UNSUBSCRIBE"]),
    ("a", ["SUBSCRIBE", "news"]), ("a", ["HELLO", "2"]), ("a", ["GET", "k"]), ("a", ["QUIT"]),
]


def only_pubsub_lines(words, received: bytes) -> bytes:
    if words and words[0] == "INFO":
        return b"\n".join(line for line in received.split(b"\r\n") if line.startswith(b"pubsub"))
    return received


def replies_of(port: int) -> list:
    clients = {"a": RawClient(port), "b": RawClient(port)}
    clients["b"].exchange("FLUSHALL")
    return run_script(clients, SCRIPT, only_pubsub_lines)


def test_the_script_gets_redis_replies_byte_for_byte(shared_server, reference_redis):
    assert_same_replies(replies_of(shared_server.port), replies_of(reference_redis))


def test_subscribe_commands_are_refused_inside_multi_and_publish_runs_in_exec(r):
    listener = r.pubsub()
    listener.subscribe("jobs")
    assert listener.get_message(timeout=2)["type"] == "subscribe"
    with pytest.raises(redis.ResponseError, match="SUBSCRIBE inside MULTI is not allowed"):
        r.execute_command("MULTI")
        try:
            r.execute_command("SUBSCRIBE", "jobs")
        finally:
            r.execute_command("DISCARD")
    pipeline = r.pipeline(transaction=True)
    pipeline.set("k", "v").publish("jobs", "done")
    assert pipeline.execute() == [True, 1]
    assert listener.get_message(timeout=2) == {"type": "message", "pattern": None, "channel": "jobs", "data": "done"}
    listener.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_pubsub_receives_messages_in_publication_order(shared_server, protocol):
    client = shared_server.client(protocol=protocol)
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.subscribe("orders")
    listener.psubscribe("ord*")
    deadline = time.monotonic() + 5
    while client.pubsub_numsub("orders") != [("orders", 1)] and time.monotonic() < deadline:
        listener.get_message(timeout=0.05)
    publisher = shared_server.client()
    for number in range(200):
        assert publisher.publish("orders", str(number)) == 2
    received = []
    while len(received) < 400 and time.monotonic() < deadline:
        message = listener.get_message(timeout=1)
        if message:
            received.append((message["type"], message["data"]))
    assert [data for kind, data in received if kind == "message"] == [str(number) for number in range(200)]
    assert [data for kind, data in received if kind == "pmessage"] == [str(number) for number in range(200)]
    listener.close()
    deadline = time.monotonic() + 5
    while publisher.pubsub_numsub("orders") != [("orders", 0)] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert publisher.pubsub_numsub("orders") == [("orders", 0)] and publisher.pubsub_numpat() == 0, "a closed connection leaves"


def test_a_listener_thread_gets_every_message_of_concurrent_publishers(shared_server):
    listener = shared_server.client().pubsub(ignore_subscribe_messages=True)
    received = []
    listener.subscribe(**{"events": lambda message: received.append(message["data"])})
    worker = listener.run_in_thread(sleep_time=0.01, daemon=True)

    def publish(prefix):
        client = shared_server.client()
        for number in range(300):
            client.publish("events", f"{prefix}{number}")

    publishers = [threading.Thread(target=publish, args=(prefix,)) for prefix in "xyz"]
    for thread in publishers:
        thread.start()
    for thread in publishers:
        thread.join()
    deadline = time.monotonic() + 10
    while len(received) < 900 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop()
    assert len(received) == 900
    for prefix in "xyz":
        assert [data for data in received if data.startswith(prefix)] == [f"{prefix}{number}" for number in range(300)], "each publisher's order"


def test_client_list_and_kill_know_subscribers(r, shared_server):
    listener = shared_server.client()
    listener_id = listener.client_id()
    subscription = listener.pubsub()
    # redis-py's PubSub opens its own connection; a raw subscriber is one known client.
    raw = RawClient(shared_server.port)
    raw.exchange("CLIENT", "SETNAME", "listener")
    raw.exchange("SUBSCRIBE", "a", "b")
    raw.exchange("PSUBSCRIBE", "p*")
    raw.exchange("SSUBSCRIBE", "s")
    [entry] = [entry for entry in r.client_list(_type="pubsub") if entry["name"] == "listener"]
    assert (entry["flags"], entry["sub"], entry["psub"], entry["ssub"]) == ("P", "2", "1", "1")
    assert all(entry["name"] != "listener" for entry in r.client_list(_type="normal"))
    assert any(int(entry["id"]) == listener_id for entry in r.client_list(_type="normal"))
    assert r.execute_command("CLIENT", "KILL", "TYPE", "pubsub") >= 1
    assert raw.read().endswith(b"<closed>")
    assert r.ping() and listener.ping(), "normal clients are left alone"
    with pytest.raises(redis.ResponseError, match="Unknown client type 'bogus'"):
        r.execute_command("CLIENT", "KILL", "TYPE", "bogus")
    with pytest.raises(redis.ResponseError, match="No such user 'bob'"):
        r.execute_command("CLIENT", "KILL", "USER", "bob")
    subscription.close()
    listener.close()


def test_a_subscriber_that_stops_reading_is_disconnected_and_others_are_served(make_server):
    server = make_server()
    stalled = socket.create_connection(("127.0.0.1", server.port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$5\r\nflood\r\n")
    healthy = server.client().pubsub(ignore_subscribe_messages=True)
    healthy.subscribe("flood")
    publisher = server.client()
    deadline = time.monotonic() + 5
    while publisher.pubsub_numsub("flood") != [("flood", 2)] and time.monotonic() < deadline:
        time.sleep(0.02)
    payload = "x" * 65536
    # 48 MiB in all, past the 32 MiB a subscriber may have waiting; the healthy one keeps up.
    for _ in range(768):
        publisher.publish("flood", payload)
        while healthy.get_message(timeout=0) is not None:
            pass
    deadline = time.monotonic() + 10
    while publisher.pubsub_numsub("flood") != [("flood", 1)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert publisher.pubsub_numsub("flood") == [("flood", 1)], "the stalled subscriber is gone"
    assert "a subscriber fell too far behind" in server.log()
    assert publisher.publish("flood", "after") == 1 and publisher.ping()
    stalled.close()
    healthy.close()


def test_monitor_is_refused_while_subscribed_in_resp3(shared_server):
    raw = RawClient(shared_server.port)
    raw.exchange("HELLO", "3")
    raw.exchange("SUBSCRIBE", "c")
    assert raw.exchange("MONITOR") == b"-ERR MONITOR is not allowed while subscribed: UNSUBSCRIBE first\r\n"
    raw.close()


def test_pipelined_writes_of_a_subscriber_are_refused_as_in_redis(shared_server, reference_redis):
    # Pipelined single-key writes run in groups; a RESP2 subscriber's writes, and a write with a
    # wrong subcommand arity, must still be refused one by one as Redis refuses them.
    def command(*words):
        return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in words)

    payload = command(b"SUBSCRIBE", b"pipelined") + command(b"LPUSH", b"subscriber-list", b"a") + command(b"LPUSH", b"subscriber-list", b"b")
    ours, theirs = (raw_exchange(port, payload, read_timeout=0.5) for port in (shared_server.port, reference_redis))
    assert ours == theirs and ours.count(b"-ERR Can't execute 'lpush'") == 2
    assert shared_server.client().exists("subscriber-list") == 0
    payload = command(b"SET", b"k", b"v") + command(b"XGROUP", b"DESTROY", b"k", b"g", b"c") + command(b"LPUSH", b"other", b"a")
    ours, theirs = (raw_exchange(port, payload, read_timeout=0.5) for port in (shared_server.port, reference_redis))
    assert ours == theirs and b"wrong number of arguments for 'xgroup|destroy' command" in ours
