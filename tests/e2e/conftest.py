"""Fixtures for the end-to-end tests: the release binary started on a free port with a temporary
--dir, a redis-py client for it, and a real redis-server to compare replies with.

Run: scripts/setup-python.sh && cargo build --release && .venv/bin/pytest tests/e2e
"""

import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

REPO_ROOT = Path(__file__).resolve().parents[2]
BINARY = REPO_ROOT / "target" / "release" / "hybridkv"
# Small regions keep each start fast and the sparse files small.
SMALL_SIZES = ["--index-bytes", "16MiB", "--data-bytes", "64MiB"]
START_TIMEOUT_SECONDS = 20.0
# Every (index tier, data tier) pair a namespace can be placed on.
PLACEMENTS = [(index, data) for index in ("dram", "shmem", "pmem") for data in ("dram", "pmem", "ssd")]
PLACEMENT_IDS = [f"index-{index}-data-{data}" for index, data in PLACEMENTS]


# Ports are drawn below the kernel's ephemeral range: a port the kernel picked for a probe bind
# could be handed to a client's outgoing connection before the server binds it.
LISTEN_PORT_LOWEST = 10000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
ports_handed_out = set()
# Its own generator: tests that seed the module-level one must not make ports repeat.
port_chooser = random.Random()


def free_port() -> int:
    """A port that is bindable now, outside the ephemeral range, and not handed out before in this
    session (two servers or a server and its metrics port never get the same one)."""
    ephemeral_lowest = int(EPHEMERAL_RANGE_FILE.read_text().split()[0]) if EPHEMERAL_RANGE_FILE.exists() else 32768
    assert ephemeral_lowest > LISTEN_PORT_LOWEST + 1000, f"ephemeral range starts at {ephemeral_lowest}"
    while True:
        port = port_chooser.randrange(LISTEN_PORT_LOWEST, ephemeral_lowest)
        if port in ports_handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports_handed_out.add(port)
        return port


def raise_open_files_limit(descriptors: int) -> bool:
    """Raises this process's soft RLIMIT_NOFILE to at least `descriptors` (servers started later
    inherit it); False when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= descriptors:
        return True
    if hard != resource.RLIM_INFINITY and hard < descriptors:
        return False
    resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, hard))
    return True


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = START_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"server did not listen on {port} within {timeout}s")


class Server:
    """One hybridkv process; `restart` keeps the directory (and so the data)."""

    def __init__(self, directory: Path, extra_args=(), port=None):
        self.directory = directory
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        self.process = None
        self.log_path = directory.parent / f"{directory.name}.log"
        self.shmem_dir = Path("/dev/shm") / f"hybridkv-e2e-{os.getpid()}-{self.port}"

    def launch(self):
        """Starts the process without waiting for it to listen (it may still be recovering)."""
        sizes = [argument for flag, value in zip(SMALL_SIZES[::2], SMALL_SIZES[1::2]) if flag not in self.extra_args for argument in (flag, value)]
        command = [str(BINARY), "serve", "--port", str(self.port), "--dir", str(self.directory), "--shmem-dir", str(self.shmem_dir), *sizes, *self.extra_args]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        return self

    def start(self):
        self.launch()
        wait_for_port(self.port, self.process)
        return self

    def status_number(self, name: str) -> int:
        """A number of the server's /proc/<pid>/status, e.g. Threads; kB fields in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                words = line.split()
                return int(words[1]) * (1024 if words[-1] == "kB" else 1)
        raise RuntimeError(f"no {name} line")

    def rss_bytes(self) -> int:
        """The server's resident memory (VmRSS)."""
        return self.status_number("VmRSS")

    def client(self, **options) -> redis.Redis:
        options.setdefault("decode_responses", True)
        options.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **options)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=timeout)
        return self.process.returncode

    def kill9(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self):
        self.stop()
        return self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def cleanup(self):
        self.kill9()
        shutil.rmtree(self.shmem_dir, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def release_binary():
    """Builds the release binary once per test session (a no-op when it is up to date)."""
    if not os.environ.get("HYBRIDKV_SKIP_BUILD"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "hybridkv"], cwd=REPO_ROOT, check=True)
    assert BINARY.exists(), f"{BINARY} missing"
    return BINARY


@pytest.fixture
def make_server(tmp_path):
    """Factory: make_server(*extra_args) starts a server in its own directory."""
    servers = []

    def make(*extra_args, name=None):
        directory = tmp_path / (name or f"data{len(servers)}")
        server = Server(directory, extra_args)
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.cleanup()


@pytest.fixture
def small_blocks_server(make_server, tmp_path):
    """A server whose namespace has 64 KiB write blocks: 255 parts per key (about 1 MiB of
    fields in one hash, set or sorted set, of elements in one list) and 32 KiB values."""
    config = tmp_path / "small-blocks.toml"
    config.write_text('[[namespace]]\nname = "small"\nindex_bytes = "16MiB"\ndata_bytes = "64MiB"\nwrite_block_bytes = "64KiB"\n')
    return make_server("--config", str(config))


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for a module of command tests (each test flushes what it needs)."""
    server = Server(tmp_path_factory.mktemp("shared") / "data").start()
    yield server
    server.cleanup()


@pytest.fixture
def r(shared_server):
    client = shared_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def reference_redis(tmp_path_factory):
    """A real redis-server, for comparing replies where Redis's behaviour is the specification."""
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.skip("redis-server not installed (run scripts/setup-python.sh)")
    port = free_port()
    directory = tmp_path_factory.mktemp("redis")
    process = subprocess.Popen(
        [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, process)
    yield port
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def pair(shared_server, reference_redis):
    """(hybridkv client, redis-server client), both decoding text, both databases emptied."""
    yield from emptied_pair(shared_server, reference_redis, decode_responses=True)


@pytest.fixture
def binary_pair(shared_server, reference_redis):
    """(hybridkv client, redis-server client), both answering bytes, both databases emptied."""
    yield from emptied_pair(shared_server, reference_redis, decode_responses=False)


def emptied_pair(shared_server, reference_redis, decode_responses):
    ours = shared_server.client(decode_responses=decode_responses)
    theirs = redis.Redis(port=reference_redis, decode_responses=decode_responses)
    for client in (ours, theirs):
        client.flushall()
    yield ours, theirs
    ours.close()
    theirs.close()


def both(pair, action):
    """`action` run on each client of a `pair`: (ours, theirs)."""
    ours, theirs = pair
    return action(ours), action(theirs)


def assert_same(pair, action):
    ours, theirs = both(pair, action)
    assert ours == theirs

def in_pipelined_batches(client, items, add, batch: int = 1000):
    """Runs `add(pipeline, item)` for every item, sending the pipeline every `batch` items."""
    pipe = client.pipeline(transaction=False)
    for number, item in enumerate(items):
        add(pipe, item)
        if number % batch == batch - 1:
            pipe.execute()
    pipe.execute()


def pipelined_replies(client, commands):
    """Each command's reply, an error as its text, from one pipeline without MULTI."""
    pipe = client.pipeline(transaction=False)
    for words in commands:
        pipe.execute_command(*words)
    return [f"error: {reply}" if isinstance(reply, Exception) else reply for reply in pipe.execute(raise_on_error=False)]


def compare_random_pipelines(pair, next_command, random, batches: int, measured_keys=()) -> int:
    """Sends `batches` pipelines of 1 to 79 commands made by `next_command` to both servers of
    `pair`, asserting the same replies; answers the largest MEMORY USAGE hybridkv gave one of
    `measured_keys` after a batch (0 when none is measured)."""
    largest = 0
    for _ in range(batches):
        batch = [next_command() for _ in range(random.randrange(1, 80))]
        assert_same(pair, lambda client: pipelined_replies(client, batch))
        largest = max([largest] + [pair[0].memory_usage(key) or 0 for key in measured_keys])
    return largest


def whole_scan(scan, key, count: int = 500) -> list:
    """Every item of an SSCAN or ZSCAN iteration: `scan` is the client's sscan or zscan."""
    cursor, seen = 0, []
    while True:
        cursor, page = scan(key, cursor, count=count)
        seen.extend(page)
        if cursor == 0:
            return seen


def assert_watch_sees(client, other, key, writes, size):
    """For each (write, aborts) of `writes`: WATCH `key` on `client`, run the write on `other`,
    then MULTI/EXEC reading `size(pipeline, key)`; EXEC aborts exactly when `aborts`."""
    for write, aborts in writes:
        pipe = client.pipeline(transaction=True)
        pipe.watch(key)
        write()
        pipe.multi()
        size(pipe, key)
        if aborts:
            with pytest.raises(redis.WatchError):
                pipe.execute()
        else:
            assert len(pipe.execute()) == 1
        pipe.reset()


def raw_exchange(port: int, payload: bytes, read_timeout: float = 2.0) -> bytes:
    """Sends raw bytes, returns everything the server sent until it closed or went quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as connection:
        connection.sendall(payload)
        received = b""
        try:
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
        except socket.timeout:
            pass
        return received


# A reply is complete once the connection has been quiet this long after its first bytes; a
# read that gets nothing waits FIRST_BYTE_WAIT_S.
QUIET_S = 0.05
FIRST_BYTE_WAIT_S = 0.5


class RawClient:
    """A connection that sends commands and returns the bytes that arrive until it goes quiet."""

    def __init__(self, port: int):
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=FIRST_BYTE_WAIT_S)

    def send(self, *words):
        encoded = [word if isinstance(word, bytes) else str(word).encode() for word in words]
        self.socket.sendall(b"*%d\r\n" % len(encoded) + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in encoded))

    def read(self) -> bytes:
        received = b""
        self.socket.settimeout(FIRST_BYTE_WAIT_S)
        try:
            while True:
                chunk = self.socket.recv(65536)
                if not chunk:
                    return received + b"<closed>"
                received += chunk
                self.socket.settimeout(QUIET_S)
        except socket.timeout:
            return received

    def exchange(self, *words) -> bytes:
        self.send(*words)
        return self.read()

    def close(self):
        self.socket.close()


def run_script(clients: dict, script, rewrite=lambda words, received: received) -> list:
    """Runs (client name, command words) steps on `clients` (RawClients by name; empty words:
    read what arrived) and closes them; returns (name, words, bytes received) per step, HELLO's
    reply cut to its first byte (server name and version differ) and passed through `rewrite`."""
    replies = []
    for name, words in script:
        received = clients[name].exchange(*words) if words else clients[name].read()
        if words and words[0] == "HELLO":
            received = received[:1]
        replies.append((name, words, rewrite(words, received)))
    for client in clients.values():
        client.close()
    return replies


def assert_same_replies(ours: list, theirs: list):
    """Each step of two `run_script` runs got the same bytes."""
    assert len(ours) == len(theirs)
    for (name, words, got), (_, _, expected) in zip(ours, theirs):
        assert got == expected, f"{name}: {words}"


def blocked_clients(client) -> int:
    """INFO's count of clients blocked in a command (a pop, XREAD, WAIT)."""
    return int(client.info("clients")["blocked_clients"])


def wait_until(condition, timeout_seconds=5.0):
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
