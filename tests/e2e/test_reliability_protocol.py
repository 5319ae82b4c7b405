"""Bad protocol input over the network, at scale: a million arguments, binary garbage, commands
held half-sent, slowloris clients, thousands of idle connections and a client that never reads.
Each gets the right reply (Redis's, where Redis is the specification), the server's resident
memory stays bounded, and a normal client is served throughout. test_protocol.py has the
single-request cases."""

import random
import socket
import time

import pytest

from conftest import raise_open_files_limit, raw_exchange

MIB = 1024 * 1024
# Generous bounds on the server's resident memory growth: a regression that buffers per byte
# announced, or per connection without bound, goes far past them.
IDLE_CONNECTIONS = 2000
RSS_GROWTH_PER_IDLE_CONNECTION_BYTES_MAX = 64 * 1024
RSS_GROWTH_BYTES_MAX = 128 * MIB
QUIET_SECONDS = 0.3
OPEN_FILES_SPARE = 256


def normal_client_works(server, key="normal"):
    client = server.client()
    value = f"value-{time.monotonic_ns()}"
    assert client.set(key, value) is True
    assert client.get(key) == value
    client.close()


def connect_many(port: int, count: int) -> list:
    if not raise_open_files_limit(count + OPEN_FILES_SPARE):
        pytest.skip(f"the open files hard limit is below {count + OPEN_FILES_SPARE}")
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def receive_exactly(connection: socket.socket, length: int) -> bytes:
    received = b""
    while len(received) < length:
        chunk = connection.recv(length - len(received))
        if not chunk:
            break
        received += chunk
    return received


@pytest.mark.parametrize(
    "payload",
    [
        b"*1\r\n$-1\r\n",
        b"*1\r\n$-2147483649\r\n",
        b"*1\r\n$99999999999999999999\r\n",
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870913\r\n",
        b"*-1\r\nPING\r\n",
        b"*0\r\nPING\r\n",
        b"$4\r\nPING\r\n",
        b"+PING\r\n:1\r\n",
        b"\r\n\r\n\nPING\r\n",
        b"*1\r\n$11\r\nFOO\r\n+OK\r\nX\r\n",
        b"FOO a\rb\r\n",
        b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n",
    ],
)
def test_malformed_lengths_and_types_get_redis_replies(shared_server, reference_redis, payload):
    """Byte for byte what redis-server answers. A QUIT follows each payload so that every exchange
    ends with the server closing: after a protocol error it is never read, otherwise it answers
    +OK."""
    ours = raw_exchange(shared_server.port, payload + b"QUIT\r\n", read_timeout=10)
    theirs = raw_exchange(reference_redis, payload + b"QUIT\r\n", read_timeout=10)
    assert ours == theirs


def test_multibulk_count_over_the_arguments_limit_is_refused(shared_server):
    """Redis 7 accepts any count up to 2^31-1 and waits; we refuse above --proto arguments max
    (1,048,576) at once instead of waiting for a request that cannot be served."""
    for count in (1024 * 1024 + 1, 2_000_000):
        assert raw_exchange(shared_server.port, b"*%d\r\n" % count) == b"-ERR Protocol error: invalid multibulk length\r\n"
    normal_client_works(shared_server)


def send_a_million_arguments(server):
    count = 1024 * 1024
    payload = b"*%d\r\n$6\r\nEXISTS\r\n" % count + b"$1\r\na\r\n" * (count - 1)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(payload)
        assert receive_exactly(connection, 4) == b":0\r\n"


def test_a_million_arguments_are_answered_with_memory_bounded(shared_server):
    rss_before = shared_server.rss_bytes()
    send_a_million_arguments(shared_server)
    normal_client_works(shared_server)
    assert shared_server.rss_bytes() - rss_before < RSS_GROWTH_BYTES_MAX


def test_binary_garbage_gets_errors_only_and_the_server_keeps_serving(shared_server):
    """Seeded random bytes (with and without newlines, with and without a leading '*'): the
    replies are error lines and nothing else, whatever the server decides to close."""
    rng = random.Random(20240601)
    for attempt in range(40):
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))
        if attempt % 4 == 0:
            garbage = b"*" + garbage
        reply = raw_exchange(shared_server.port, garbage, read_timeout=QUIET_SECONDS)
        lines = [line for line in reply.split(b"\r\n") if line]
        assert all(line.startswith(b"-") for line in lines), (garbage[:64], reply[:200])
    normal_client_works(shared_server)


def test_commands_held_half_sent_are_answered_once_completed(shared_server):
    command = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$5\r\nvalue\r\n"
    keys = [b"half%d" % i for i in range(100)]
    payloads = [command % (len(key), key) for key in keys]
    connections = [socket.create_connection(("127.0.0.1", shared_server.port), timeout=10) for _ in keys]
    for i, (connection, payload) in enumerate(zip(connections, payloads)):
        connection.sendall(payload[: 1 + i % (len(payload) - 1)])
    client = shared_server.client()
    assert client.exists(*[key.decode() for key in keys]) == 0
    normal_client_works(shared_server)
    for i, (connection, payload) in enumerate(zip(connections, payloads)):
        connection.sendall(payload[1 + i % (len(payload) - 1) :])
    assert [receive_exactly(connection, 5) for connection in connections] == [b"+OK\r\n"] * len(keys)
    assert client.mget([key.decode() for key in keys]) == ["value"] * len(keys)
    for connection in connections:
        connection.close()
    client.close()


def test_slowloris_clients_are_served_and_do_not_block_others(shared_server):
    """200 clients dribble a SET one byte per round: the normal client gets answers between
    rounds, and every slow SET is answered once its last byte arrives."""
    slow_clients = 200
    payloads = [b"*3\r\n$3\r\nSET\r\n$6\r\nslow%02x\r\n$16\r\n%s\r\n" % (i, b"%016d" % i) for i in range(slow_clients)]
    connections = connect_many(shared_server.port, slow_clients)
    client = shared_server.client()
    for position in range(len(payloads[0])):
        for connection, payload in zip(connections, payloads):
            connection.sendall(payload[position : position + 1])
        assert client.ping() is True
        time.sleep(0.005)
    assert [receive_exactly(connection, 5) for connection in connections] == [b"+OK\r\n"] * slow_clients
    assert client.get("slow07") == "%016d" % 7
    for connection in connections:
        connection.close()
    client.close()


def test_huge_announced_bulks_dribbled_slowly_keep_memory_bounded(make_server):
    """500 clients each announce a 100 MB value and send 1 KiB of it slowly: the server must not
    reserve what was announced (500 x 100 MB), only hold what arrived. A large request first
    makes glibc serve the next megabyte-sized buffers from its heap, where growing a buffer copies
    (and so makes resident) all of its old capacity: reservations then show in VmRSS."""
    server = make_server()
    send_a_million_arguments(server)
    connections = connect_many(server.port, 500)
    rss_before = server.rss_bytes()
    for connection in connections:
        connection.sendall(b"*3\r\n$3\r\nSET\r\n$4\r\nhuge\r\n$100000000\r\n")
    for _ in range(4):
        for connection in connections:
            connection.sendall(b"x" * 256)
        time.sleep(0.05)
    normal_client_works(server)
    assert server.rss_bytes() - rss_before < RSS_GROWTH_BYTES_MAX
    for connection in connections:
        connection.close()
    assert server.client().exists("huge") == 0


def test_thousands_of_idle_connections(shared_server):
    rss_before = shared_server.rss_bytes()
    connections = connect_many(shared_server.port, IDLE_CONNECTIONS)
    normal_client_works(shared_server)
    for connection in connections:
        connection.sendall(b"PING\r\n")
    assert [receive_exactly(connection, 7) for connection in connections] == [b"+PONG\r\n"] * IDLE_CONNECTIONS
    client = shared_server.client()
    assert client.info("clients")["connected_clients"] >= IDLE_CONNECTIONS + 1
    assert shared_server.rss_bytes() - rss_before < IDLE_CONNECTIONS * RSS_GROWTH_PER_IDLE_CONNECTION_BYTES_MAX
    for connection in connections:
        connection.close()
    deadline = time.monotonic() + 10
    while client.info("clients")["connected_clients"] > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.info("clients")["connected_clients"] == 1
    client.close()


def test_a_client_that_never_reads_its_replies_does_not_grow_the_server(shared_server):
    """2,000 pipelined GETs of a 1 MiB value (2 GiB of replies) never read: the server waits on
    the socket instead of buffering the replies (Redis buffers them: its normal clients have no
    output limit)."""
    client = shared_server.client()
    client.set("big", "v" * MIB)
    rss_before = shared_server.rss_bytes()
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=10) as greedy:
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        greedy.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 2000)
        time.sleep(0.5)
        normal_client_works(shared_server)
        assert shared_server.rss_bytes() - rss_before < RSS_GROWTH_BYTES_MAX
    normal_client_works(shared_server)
    client.close()
