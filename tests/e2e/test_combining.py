"""Single-key writes of different clients to one key run in one transaction when they meet
(docs/design/server.md, "Writes of different clients to one key"): each client still gets the
reply it would get alone, in its own order, and acknowledged writes survive kill -9.

Bursts make the writes meet: a request goes out on every connection before any reply is read."""

import threading
import time

import pytest
import redis

CONNECTIONS = 24
BURSTS = 60
# Writes meet when a worker takes a request while the other runs a write to its key: most
# bursts, not every one on a loaded machine. A test bursts on until some met, at most this many.
BURSTS_MAX = 3000


def connections(server, count: int = CONNECTIONS) -> list:
    made = [redis.Connection(host="127.0.0.1", port=server.port, socket_timeout=10, decode_responses=True) for _ in range(count)]
    for connection in made:
        connection.connect()
    return made


def burst(conns, commands) -> list:
    """Sends commands[i] on conns[i], all before reading any reply; returns the replies (an
    error reply as its exception)."""
    for connection, command in zip(conns, commands):
        connection.send_command(*command)
    replies = []
    for connection, _ in zip(conns, commands):
        try:
            replies.append(connection.read_response())
        except redis.ResponseError as error:
            replies.append(error)
    return replies


def stat(client, name: str) -> int:
    return int(client.info("stats")[name])


def burst_rounds(client, at_least: int):
    """Round numbers: `at_least`, then more until some writes met (`BURSTS_MAX` at most)."""
    round_number = 0
    while round_number < at_least or stat(client, "combined_writes") == 0:
        assert round_number < BURSTS_MAX, "no writes met: the test would prove nothing"
        yield round_number
        round_number += 1


def test_pushes_of_many_clients_to_one_list_each_answer_as_alone(make_server):
    server = make_server("--durability", "periodic")
    client = server.client()
    conns = connections(server)
    lengths = []
    for round_number in burst_rounds(client, BURSTS):
        lengths += burst(conns, [("LPUSH", "list", f"{number}:{round_number}") for number in range(len(conns))])
    bursts = len(lengths) // CONNECTIONS
    assert sorted(lengths) == list(range(1, CONNECTIONS * bursts + 1)), "each push answers the length it made"
    assert stat(client, "combined_write_rounds") <= stat(client, "combined_writes")
    elements = client.lrange("list", 0, -1)
    assert len(elements) == CONNECTIONS * bursts
    for number in range(CONNECTIONS):
        mine = [element for element in elements if element.startswith(f"{number}:")]
        assert mine == [f"{number}:{round_number}" for round_number in reversed(range(bursts))], "one client's pushes keep its order"
    assert int(client.info("commandstats")["cmdstat_lpush"]["calls"]) == CONNECTIONS * bursts


def test_pipelines_of_many_clients_to_one_list_each_answer_as_alone(make_server):
    """Each connection sends a pipeline of pushes and pops on one list: whole groups meet."""
    server = make_server("--durability", "periodic")
    client = server.client()
    conns = connections(server)
    per_client = 10
    lengths, popped = [], []
    for round_number in burst_rounds(client, BURSTS // 2):
        for connection, number in zip(conns, range(len(conns))):
            connection.send_packed_command(connection.pack_commands([("RPUSH", "list", f"{number}:{round_number}:{i}") for i in range(per_client)] + [("LPOP", "list")]))
        for connection in conns:
            replies = [connection.read_response() for _ in range(per_client + 1)]
            assert replies[:per_client] == sorted(replies[:per_client]) and len(set(replies[:per_client])) == per_client, replies
            lengths += replies[:per_client]
            popped.append(replies[-1])
    pushed = len(lengths)
    assert client.llen("list") == pushed - len(popped)
    assert len(set(popped)) == len(popped) and None not in popped, "every pop took an element of its own"
    rest = client.lrange("list", 0, -1)
    assert sorted(popped + rest) == sorted(f"{number}:{round_number}:{i}" for number in range(CONNECTIONS) for round_number in range(pushed // per_client // CONNECTIONS) for i in range(per_client))
    for number in range(CONNECTIONS):
        mine = [element for element in popped + rest if element.startswith(f"{number}:")]
        assert len(mine) == pushed // CONNECTIONS


def test_a_redis_error_fails_only_its_own_clients_write(make_server):
    server = make_server("--durability", "periodic")
    client = server.client()
    conns = connections(server)
    client.rpush("key", "first")
    pushes = 1
    for round_number in burst_rounds(client, BURSTS // 2):
        commands = [("SADD", "key", "m") if number % 3 == 0 else ("RPUSH", "key", f"{number}:{round_number}") for number in range(len(conns))]
        replies = burst(conns, commands)
        for command, reply in zip(commands, replies):
            if command[0] == "SADD":
                assert isinstance(reply, redis.ResponseError) and str(reply).startswith("WRONGTYPE"), reply
            else:
                assert isinstance(reply, int), reply
        pushes += sum(command[0] == "RPUSH" for command in commands)
    assert client.llen("key") == pushes


def test_a_round_that_aborts_runs_its_writes_one_at_a_time(make_server):
    """XADDs with an ID too small among XADDs with `*`: a refused XADD aborts its round's
    transaction (it took the kept stream and dropped it), and each write then meets the
    outcome it meets alone."""
    server = make_server("--durability", "periodic")
    client = server.client()
    client.xadd("stream", {"f": "v"}, id="1000-0")
    conns = connections(server)
    added = 1
    for _ in burst_rounds(client, BURSTS // 2):
        commands = [("XADD", "stream", "5-0" if number % 4 == 0 else "*", "f", str(number)) for number in range(len(conns))]
        replies = burst(conns, commands)
        for command, reply in zip(commands, replies):
            if command[2] == "5-0":
                assert isinstance(reply, redis.ResponseError) and "equal or smaller" in str(reply), reply
            else:
                assert isinstance(reply, str) and int(reply.split("-")[0]) >= 1000, reply
        new_ids = [reply for command, reply in zip(commands, replies) if command[2] == "*"]
        assert len(set(new_ids)) == len(new_ids)
        added += len(new_ids)
    assert client.xlen("stream") == added


def test_acknowledged_pushes_of_meeting_clients_survive_kill_9(make_server):
    server = make_server("--durability", "always")
    conns = connections(server)
    acknowledged = []
    stop = threading.Event()

    def load():
        round_number = 0
        try:
            while not stop.is_set():
                commands = [("RPUSH", "list", f"{number}:{round_number}") for number in range(len(conns))]
                for (_, _, value), reply in zip(commands, burst(conns, commands)):
                    assert isinstance(reply, int), reply
                    acknowledged.append(value)
                round_number += 1
        except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError):
            pass  # the server was killed under us

    thread = threading.Thread(target=load)
    thread.start()
    time.sleep(1.5)
    server.kill9()
    stop.set()
    thread.join(timeout=20)
    assert len(acknowledged) > 10 * CONNECTIONS, "the load did not get going"
    server.start()
    elements = server.client().lrange("list", 0, -1)
    lost = set(acknowledged) - set(elements)
    assert not lost, f"{len(lost)} acknowledged pushes lost, e.g. {sorted(lost)[:3]}"
    for number in range(CONNECTIONS):
        mine = [element for element in elements if element.startswith(f"{number}:")]
        assert mine == [f"{number}:{round_number}" for round_number in range(len(mine))], "a client's pushes are a prefix of what it sent, in order"


@pytest.mark.parametrize("command", [("ZINCRBY", "zset", "1", "member"), ("RPUSH", "list", "element")])
def test_writes_of_meeting_clients_count_every_one(make_server, command):
    server = make_server("--durability", "periodic")
    client = server.client()
    conns = connections(server)
    replies = []
    for _ in burst_rounds(client, BURSTS // 2):
        replies += burst(conns, [command] * len(conns))
    assert sorted(int(float(reply)) for reply in replies) == list(range(1, len(replies) + 1))


def test_writes_that_keep_no_value_open_never_meet(make_server):
    """INCR and HINCRBY run alone, as before: a meeting costs more than they would share."""
    server = make_server("--durability", "periodic")
    client = server.client()
    conns = connections(server)
    replies = []
    for _ in range(BURSTS // 2):
        replies += burst(conns, [("INCR", "counter")] * len(conns))
        burst(conns, [("HINCRBY", "hash", "field", "1")] * len(conns))
    assert sorted(replies) == list(range(1, len(replies) + 1))
    assert stat(client, "combined_writes") == 0
