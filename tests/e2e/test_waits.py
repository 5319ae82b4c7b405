"""WAIT and WAITAOF: no replicas ever acknowledge (a blocked client waits out its timeout, and
its later requests with it), and WAITAOF 1 makes the writes so far durable before it answers,
even under `--durability periodic` (docs/design/server.md, "WAIT and WAITAOF")."""

import socket
import time
import urllib.request

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import blocked_clients, free_port, wait_until


def metrics_text(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_wait_for_replicas_blocks_for_its_timeout_and_the_requests_after_it_wait_too(make_server):
    server = make_server()
    client = server.client()
    assert client.execute_command("WAIT", 0, 0) == 0
    assert client.execute_command("WAIT", -3, 0) == 0
    started = time.monotonic()
    assert client.execute_command("WAIT", 1, 200) == 0
    assert time.monotonic() - started >= 0.2
    # Pipelined: PING is answered after WAIT's timeout, in order.
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
        started = time.monotonic()
        connection.sendall(b"WAIT 2 150\r\nPING\r\n")
        received = b""
        while received.count(b"\r\n") < 2:
            received += connection.recv(100)
        assert received == b":0\r\n+PONG\r\n"
        assert time.monotonic() - started >= 0.15
    # Nothing blocks inside a transaction; WAITAOF asking for replicas blocks as WAIT does.
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("WAIT", 1, 0).execute_command("WAITAOF", 1, 1, 0).set("k", "v")
    assert pipe.execute() == [0, [1, 0], True]
    started = time.monotonic()
    assert client.execute_command("WAITAOF", 0, 1, 100) == [1, 0]
    assert time.monotonic() - started >= 0.1


def test_a_client_blocked_without_timeout_is_freed_by_leaving_by_client_kill_by_client_unblock_and_by_shutdown(make_server):
    metrics_port = free_port()
    server = make_server("--metrics-port", str(metrics_port))
    client = server.client()
    assert blocked_clients(client) == 0
    leaving = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    leaving.sendall(b"WAIT 1 0\r\n")
    wait_until(lambda: blocked_clients(client) == 1)
    leaving.close()
    wait_until(lambda: blocked_clients(client) == 0)

    killed = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    killed.sendall(b"CLIENT ID\r\n")
    killed_id = int(killed.recv(100)[1:-2])
    killed.sendall(b"WAIT 1 0\r\nPING\r\n")
    wait_until(lambda: blocked_clients(client) == 1)
    assert "\nhybridkv_blocked_clients 1\n" in metrics_text(metrics_port)
    assert client.info("clients")["connected_clients"] == 2
    assert client.client_kill_filter(_id=killed_id) == 1
    assert killed.recv(100) == b"", "killed without the reply, its PING never run"
    wait_until(lambda: blocked_clients(client) == 0)
    assert "\nhybridkv_blocked_clients 0\n" in metrics_text(metrics_port)

    # CLIENT UNBLOCK ends the wait: as if timed out (the PING behind it runs then), or with an error.
    unblocked = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    unblocked.sendall(b"CLIENT ID\r\n")
    unblocked_id = int(unblocked.recv(100)[1:-2])
    unblocked.sendall(b"WAITAOF 0 1 0\r\nPING\r\n")
    wait_until(lambda: blocked_clients(client) == 1)
    listed = [line for line in client.execute_command("CLIENT", "LIST").splitlines() if f"id={unblocked_id} " in line]
    assert " flags=b " in listed[0] and " cmd=waitaof " in listed[0]
    assert client.execute_command("CLIENT", "UNBLOCK", unblocked_id) == 1
    received = b""
    while received.count(b"\r\n") < 4:
        received += unblocked.recv(100)
    assert received == b"*2\r\n:1\r\n:0\r\n+PONG\r\n"
    assert client.execute_command("CLIENT", "UNBLOCK", unblocked_id) == 0, "no longer blocked"
    unblocked.sendall(b"WAIT 5 0\r\n")
    wait_until(lambda: blocked_clients(client) == 1)
    assert client.execute_command("CLIENT", "UNBLOCK", unblocked_id, "ERROR") == 1
    assert unblocked.recv(100) == b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    wait_until(lambda: blocked_clients(client) == 0)
    assert " flags=N " in client.execute_command("CLIENT", "LIST")
    unblocked.close()

    stuck = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    stuck.sendall(b"WAIT 1 0\r\n")
    wait_until(lambda: blocked_clients(client) == 1)
    started = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - started < 10, "a blocked client does not hold the shutdown up"
    stuck.close()


@pytest.mark.parametrize("data", ["ssd", "dram"])
def test_waitaof_makes_periodic_writes_durable_before_it_answers(make_server, data):
    # A minute between periodic flushes: only WAITAOF's own flush can make the writes durable
    # before the kill (records on ssd wait in the active block's DRAM copy, on dram in the
    # journal's unsynced tail).
    server = make_server("--index", "pmem", "--data", data, "--durability", "periodic", "--periodic-ms", "60000")
    client = server.client(retry=Retry(NoBackoff(), 0))
    client.execute_command("WAITAOF", 1, 0, 0)
    flushes_before = client.info("persistence")["ns_default_flushes"]
    pipe = client.pipeline(transaction=False)
    for number in range(300):
        pipe.set(f"key:{number}", f"value {number}")
    pipe.execute()
    assert client.execute_command("WAITAOF", 0, 0, 0) == [0, 0], "not yet durable, and numlocal 0 waits for nothing"
    assert client.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    assert client.info("persistence")["ns_default_flushes"] > flushes_before
    assert client.execute_command("WAITAOF", 0, 0, 0) == [1, 0]
    server.kill9()
    server.start()
    client = server.client()
    assert client.mget([f"key:{number}" for number in range(300)]) == [f"value {number}" for number in range(300)]


def test_waitaof_errors_as_redis(make_server):
    server = make_server("--durability", "none")
    client = server.client()
    for arguments, error in [
        ((2, 0, 0), "value is out of range, value must between 0 and 1"),
        ((-1, 0, 0), "value is out of range, value must between 0 and 1"),
        (("x", 0, 0), "value is not an integer or out of range"),
        ((0, -1, 0), "value is out of range, must be positive"),
        ((0, "x", 0), "value is out of range, must be positive"),
        ((0, 0, -1), "timeout is negative"),
        ((0, 0, "x"), "timeout is not an integer or out of range"),
        ((1, 0, -5), "timeout is negative"),
        ((1, 0, 0), "WAITAOF cannot be used when numlocal is set but appendonly is disabled."),
    ]:
        with pytest.raises(redis.ResponseError) as raised:
            client.execute_command("WAITAOF", *arguments)
        assert str(raised.value) == error, arguments
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'waitaof' command"):
        client.execute_command("WAITAOF", 0, 0)
    assert client.config_get("appendonly") == {"appendonly": "no"}
    assert client.execute_command("WAITAOF", 0, 0, 0) == [0, 0], "nothing is ever made durable here"
