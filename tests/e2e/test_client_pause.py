"""CLIENT PAUSE and UNPAUSE: writes (or every command) held back until the pause ends or is
lifted, as Redis does; each test has its own server, since a pause holds every client of it.
Error replies are compared with Redis in test_compare_redis.py ("client pause")."""

import socket
import threading
import time

import redis

PAUSE_LONG_MS = 60_000
# A held command is looked at after this long: still held (its pause lasts a minute).
HELD_CHECK_S = 0.3


def call_in_thread(function):
    """Runs `function` on a thread; returns the thread and a dict that gets its result."""
    result = {}

    def run():
        started = time.monotonic()
        result["value"] = function()
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def answered_during_the_pause(function):
    """The result of `function`, which must come back while a minute-long pause holds."""
    thread, result = call_in_thread(function)
    thread.join(timeout=5)
    assert not thread.is_alive(), "held back by the pause"
    return result["value"]


def client_flags(client, client_id):
    return client.client_list(client_id=[client_id])[0]["flags"]


def test_a_write_pause_holds_writes_until_unpause_and_lets_reads_through(make_server):
    server = make_server()
    admin, writer = server.client(), server.client()
    writer.set("k", "before")
    writer_id = writer.client_id()
    assert admin.client_pause(PAUSE_LONG_MS, all=False)
    assert answered_during_the_pause(lambda: (writer.get("k"), writer.exists("k"))) == ("before", 1)
    thread, result = call_in_thread(lambda: writer.set("k", "after"))
    time.sleep(HELD_CHECK_S)
    assert thread.is_alive(), "a write waits for the pause"
    assert admin.get("k") == "before"
    assert admin.info("clients")["blocked_clients"] == 1 and client_flags(admin, writer_id) == "b"
    assert admin.client_unblock(writer_id) == 0, "CLIENT UNBLOCK does not end a pause"
    assert admin.client_unpause()
    thread.join(timeout=10)
    assert result["value"] is True and admin.get("k") == "after"
    assert admin.info("clients")["blocked_clients"] == 0 and client_flags(admin, writer_id) == "N"


def test_a_write_pause_holds_queued_writes_and_exec_of_writes_not_read_transactions(make_server):
    server = make_server()
    admin, other = server.client(), server.client()
    admin.set("k", "1")
    assert admin.client_pause(PAUSE_LONG_MS, all=False)
    reads = other.pipeline(transaction=True)
    reads.get("k").exists("k")
    assert answered_during_the_pause(reads.execute) == ["1", 1], "a transaction of reads runs"
    assert answered_during_the_pause(lambda: other.execute_command("MULTI")) == "OK"
    thread, result = call_in_thread(lambda: other.execute_command("INCR", "k"))
    time.sleep(HELD_CHECK_S)
    assert thread.is_alive(), "queueing a write waits"
    admin.client_unpause()
    thread.join(timeout=10)
    assert result["value"] == "QUEUED"
    assert admin.client_pause(PAUSE_LONG_MS, all=False)
    thread, result = call_in_thread(lambda: other.execute_command("EXEC"))
    time.sleep(HELD_CHECK_S)
    assert thread.is_alive() and admin.get("k") == "1", "EXEC of a write waits"
    admin.client_unpause()
    thread.join(timeout=10)
    assert result["value"] == [2] and admin.get("k") == "2"


def test_a_pause_ends_by_itself_and_a_second_one_keeps_the_stricter_mode_and_later_end(make_server):
    server = make_server()
    admin, other = server.client(), server.client()
    pause_s = 1.0
    assert admin.client_pause(int(pause_s * 1000), all=False)
    assert admin.client_pause(10, all=True), "ALL for 10 ms: the pause becomes ALL until the later end"
    started = time.monotonic()
    assert other.ping()
    assert time.monotonic() - started >= pause_s - 0.1, "a read waited: the mode became ALL"
    assert other.set("k", "v"), "the pause ended by itself"


def test_an_all_pause_holds_every_command_but_answers_refusals_at_once(make_server):
    server = make_server()
    admin = server.client()
    assert admin.client_pause(PAUSE_LONG_MS)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as held:
        # Unknown commands and wrong arities are answered before the pause is looked at.
        held.sendall(b"NOSUCH\r\nGET\r\n")
        replies = b""
        while replies.count(b"\r\n") < 2:
            replies += held.recv(1000)
        assert replies.startswith(b"-ERR unknown command 'NOSUCH'") and b"-ERR wrong number of arguments for 'get'" in replies
        held.sendall(b"PING\r\n")
        held.settimeout(HELD_CHECK_S)
        try:
            early = held.recv(100)
        except socket.timeout:
            early = None
        assert early is None, f"PING answered during the pause: {early!r}"
        # SIGTERM still stops the server: a held client does not hold the shutdown up.
        started = time.monotonic()
        assert server.stop() == 0
        assert time.monotonic() - started < 10
        held.settimeout(10)
        assert held.recv(100) == b"", "the held connection is closed without a reply"


def test_unpause_from_a_client_waits_out_an_all_pause_as_in_redis(make_server):
    server = make_server()
    admin, other = server.client(), server.client()
    other.ping()
    pause_s = 0.8
    assert admin.client_pause(int(pause_s * 1000))
    started = time.monotonic()
    assert other.client_unpause()
    assert time.monotonic() - started >= pause_s - 0.1
    assert other.ping()
