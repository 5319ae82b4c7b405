"""CLIENT TRACKING (client-side caching): replies and invalidations byte for byte as
redis-server sends them, and a cache kept by a tracking client under concurrent writes that never
ends up stale. (redis-py 8's own cache is not tried: it refuses any server whose HELLO does not
name Redis 7.4 or later.)"""

import random
import re
import socket
import threading
import time

from conftest import RawClient, assert_same_replies, run_script

# (client, words). "{c}" stands for client c's id, "{gone}" for the id of a client that left.
SCRIPT = [
    ("a", ["CLIENT", "TRACKING", "ON"]), ("a", ["CLIENT", "TRACKINGINFO"]), ("a", ["GET", "k"]), ("b", ["SET", "k", "1"]), ("a", []),
    ("c", ["SUBSCRIBE", "__redis__:invalidate"]), ("a", ["CLIENT", "TRACKING", "ON", "REDIRECT", "{c}"]), ("a", ["GET", "k"]),
    ("a", ["MGET", "k", "k2"]), ("b", ["MSET", "k", "2", "k2", "3"]), ("c", []), ("a", []), ("a", ["CLIENT", "TRACKINGINFO"]),
    ("a", ["CLIENT", "GETREDIR"]), ("a", ["GET", "k"]), ("b", ["FLUSHALL"]), ("c", []),
    ("b", ["CLIENT", "TRACKING", "ON", "REDIRECT", "0"]), ("b", ["CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"]),
    ("b", ["CLIENT", "CACHING", "YES"]), ("b", ["CLIENT", "TRACKING", "ON", "PREFIX", "a"]), ("b", ["CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"]),
    ("b", ["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"]), ("b", ["CLIENT", "TRACKING", "MAYBE"]),
    ("b", ["CLIENT", "TRACKING", "ON", "BOGUS"]), ("b", ["CLIENT", "TRACKING", "ON", "REDIRECT", "abc"]),
    ("b", ["CLIENT", "TRACKING", "ON", "REDIRECT"]), ("b", ["CLIENT", "TRACKING", "ON", "OPTOUT"]), ("b", ["CLIENT", "CACHING", "YES"]),
    ("b", ["CLIENT", "CACHING", "NO"]), ("b", ["CLIENT", "CACHING", "maybe"]), ("b", ["CLIENT", "TRACKING", "ON", "OPTIN"]),
    ("b", ["CLIENT", "TRACKING", "ON", "BCAST"]), ("b", ["CLIENT", "TRACKING", "ON", "NOLOOP"]), ("b", ["CLIENT", "TRACKINGINFO"]),
    ("b", ["CLIENT", "TRACKING", "OFF"]), ("b", ["CLIENT", "TRACKINGINFO"]), ("b", ["CLIENT", "GETREDIR"]),
    # RESP3: pushes on the client's own connection.
    ("d", ["HELLO", "3"]), ("d", ["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:", "PREFIX", "obj"]),
    ("b", ["SET", "user:1", "x"]), ("b", ["SET", "other", "y"]), ("b", ["SET", "obj", "z"]), ("d", []), ("d", ["CLIENT", "TRACKINGINFO"]),
    ("d", ["SET", "user:2", "x"]), ("d", ["CLIENT", "TRACKING", "OFF"]), ("e", ["HELLO", "3"]),
    ("e", ["CLIENT", "TRACKING", "ON", "OPTIN", "NOLOOP"]), ("e", ["GET", "q"]), ("e", ["CLIENT", "CACHING", "YES"]), ("e", ["GET", "q2"]),
    ("b", ["SET", "q", "1"]), ("b", ["SET", "q2", "1"]), ("e", []), ("e", ["CLIENT", "CACHING", "YES"]), ("e", ["GET", "q2"]),
    ("e", ["SET", "q2", "2"]), ("e", ["CLIENT", "TRACKINGINFO"]), ("f", ["HELLO", "3"]), ("f", ["CLIENT", "TRACKING", "ON"]),
    ("f", ["GET", "self"]), ("f", ["SET", "self", "1"]), ("f", ["GET", "self"]),
    ("f", ["CLIENT", "TRACKING", "ON", "REDIRECT", "{gone}"]), ("f", ["GET", "x"]), ("b", ["SET", "x", "1"]), ("f", []),
    ("f", ["CLIENT", "TRACKINGINFO"]), ("f", ["RESET"]), ("f", ["CLIENT", "TRACKINGINFO"]),
]


def client_id(client: RawClient) -> str:
    return re.search(rb":(\d+)", client.exchange("CLIENT", "ID")).group(1).decode()


def replies_of(port: int) -> list:
    clients = {name: RawClient(port) for name in "abcdef"}
    clients["b"].exchange("FLUSHALL")
    gone = RawClient(port)
    ids = {"c": client_id(clients["c"]), "gone": client_id(gone)}
    gone.close()
    time.sleep(0.1)
    script = [(name, [word.format(**ids) for word in words]) for name, words in SCRIPT]

    def named_ids(words, received: bytes) -> bytes:
        for role, number in ids.items():
            received = received.replace(b":%s\r\n" % number.encode(), b":<%s>\r\n" % role.encode())
        return received

    return run_script(clients, script, named_ids)


def test_the_script_gets_redis_replies_and_invalidations_byte_for_byte(shared_server, reference_redis):
    assert_same_replies(replies_of(shared_server.port), replies_of(reference_redis))


def test_swapdb_tells_every_tracking_client_to_drop_its_cache(shared_server):
    # Redis 7.0 sends nothing here, and its clients' caches then serve the other database's
    # values; a needless invalidation costs a read, a missing one a stale value.
    tracker, other = RawClient(shared_server.port), RawClient(shared_server.port)
    tracker.exchange("HELLO", "3")
    tracker.exchange("CLIENT", "TRACKING", "ON")
    tracker.exchange("GET", "k")
    assert other.exchange("SWAPDB", "0", "1") == b"+OK\r\n"
    assert tracker.read() == b">2\r\n$10\r\ninvalidate\r\n_\r\n"
    other.exchange("SWAPDB", "0", "1")
    tracker.close()
    other.close()


class Resp3Reader:
    """Reads RESP3 frames from a socket: pushes come back as ("push", items)."""

    def __init__(self, connection: socket.socket):
        self.connection = connection
        self.buffer = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.connection.recv(65536)
            assert chunk, "connection closed"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _exactly(self, count: int) -> bytes:
        while len(self.buffer) < count + 2:
            chunk = self.connection.recv(65536)
            assert chunk, "connection closed"
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count + 2:]
        return data

    def frame(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"_":
            return None
        if kind == b"$":
            return self._exactly(int(rest)).decode()
        if kind in (b"*", b">", b"~"):
            items = [self.frame() for _ in range(int(rest))]
            return ("push", items) if kind == b">" else items
        if kind == b"%":
            return {self.frame(): self.frame() for _ in range(int(rest))}
        raise AssertionError(f"unexpected frame {line!r}")


def test_a_tracking_clients_cache_is_never_left_stale_by_concurrent_writes(shared_server):
    keys = [f"hot:{number}" for number in range(4)]
    writer = shared_server.client()
    for key in keys:
        writer.set(key, "0")
    connection = socket.create_connection(("127.0.0.1", shared_server.port), timeout=10)
    reader = Resp3Reader(connection)

    def call(*words):
        connection.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(word), word.encode()) for word in words))
        while True:
            frame = reader.frame()
            if isinstance(frame, tuple):
                invalidate(frame)
            else:
                return frame

    cache = {}

    def invalidate(push):
        kind, items = push
        assert kind == "push" and items[0] == "invalidate"
        for key in items[1] or list(cache):
            cache.pop(key, None)

    call("HELLO", "3")
    assert call("CLIENT", "TRACKING", "ON") == "OK"
    stop = threading.Event()

    def write(seed):
        # Pipelined, so that writes land while the reader's GETs run.
        client = shared_server.client()
        rng = random.Random(seed)
        version = 0
        while not stop.is_set():
            pipeline = client.pipeline(transaction=False)
            for _ in range(100):
                version += 1
                pipeline.set(rng.choice(keys), f"{seed}:{version}")
            pipeline.execute()
        client.close()

    threads = [threading.Thread(target=write, args=(seed,)) for seed in (7, 8)]
    for thread in threads:
        thread.start()
    rng = random.Random(11)
    reads = 0
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        key = rng.choice(keys)
        if key not in cache:
            cache[key] = call("GET", key)
            reads += 1
        else:
            # A cache hit costs no read; the PING takes the invalidations that came meanwhile.
            call("PING")
    stop.set()
    for thread in threads:
        thread.join()
    # A PING's reply comes after every invalidation of the writes that ended before it.
    time.sleep(0.2)
    assert call("PING") == "PONG"
    assert reads > 100, "the cache was refilled again and again"
    current = {key: writer.get(key) for key in keys}
    stale = {key: (value, current[key]) for key, value in cache.items() if value != current[key]}
    assert not stale, f"cached values older than the server's: {stale}"
    connection.close()
    writer.close()
