"""INFO commandstats, latencystats and errorstats, total_error_replies, and SLOWLOG: what operators and their
monitoring read to find which commands run, fail and are slow (docs/design/server.md,
"Command statistics and the slow log")."""

import math
import re
import socket
import time
import urllib.request

import pytest
import redis

from conftest import free_port, raw_exchange


def command_stats(client) -> dict:
    """INFO commandstats as {name: {calls, usec, usec_per_call, rejected_calls, failed_calls}}."""
    return {name.removeprefix("cmdstat_"): fields for name, fields in client.info("commandstats").items()}


def calls(client, name: str) -> tuple:
    fields = command_stats(client).get(name, {})
    return fields.get("calls", 0), fields.get("rejected_calls", 0), fields.get("failed_calls", 0)


def test_commandstats_count_calls_rejections_and_failures_per_command_and_subcommand(make_server):
    server = make_server()
    client = server.client()
    client.config_resetstat()
    client.set("s", "v")
    client.hset("h", "f", "1")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.hget("s", "f")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'get'"):
        client.execute_command("GET")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'config|get'"):
        client.execute_command("CONFIG", "GET")
    with pytest.raises(redis.ResponseError, match="unknown command"):
        client.execute_command("NOSUCHCOMMAND", "x")
    with pytest.raises(redis.ResponseError, match="unknown subcommand"):
        client.execute_command("CONFIG", "NOSUCH")
    client.config_get("maxclients")
    assert calls(client, "set") == (1, 0, 0)
    assert calls(client, "hget") == (1, 0, 1)
    assert calls(client, "get") == (0, 1, 0)
    assert calls(client, "config|get") == (1, 1, 0)
    assert calls(client, "config|resetstat") == (1, 0, 0)
    assert "nosuchcommand" not in command_stats(client) and "config" not in command_stats(client), "unknown commands and subcommands have no row"
    stats = command_stats(client)["set"]
    assert stats["usec"] >= 0 and stats["usec_per_call"] == pytest.approx(stats["usec"] / stats["calls"], abs=0.01)
    # Pipelined writes run in groups: each is still one call.
    pipe = client.pipeline(transaction=False)
    for number in range(40):
        pipe.set(f"k{number}", number)
    pipe.execute()
    assert calls(client, "set")[0] == 41
    # A transaction counts EXEC, MULTI and every command it ran (not their queueing).
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("INCR", "n").execute_command("INCR", "s").get("n")
    assert pipe.execute(raise_on_error=False)[0] == 1
    assert calls(client, "incr") == (2, 0, 1)
    assert calls(client, "exec") == (1, 0, 0) and calls(client, "multi") == (1, 0, 0)
    # A command refused while queueing is rejected, and EXECABORT fails EXEC.
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    raw.sendall(b"MULTI\r\nGET\r\nEXEC\r\n")
    time.sleep(0.3)
    assert b"EXECABORT" in raw.recv(1000)
    raw.close()
    assert calls(client, "get") == (1, 2, 0) and calls(client, "exec") == (2, 0, 1)
    client.config_resetstat()
    assert set(command_stats(client)) == {"config|resetstat"}


def test_latencystats_report_percentiles_per_command_that_ran_as_redis_lays_them_out(make_server):
    server = make_server()
    client = server.client(protocol=2)
    assert client.config_get("latency-tracking*") == {"latency-tracking": "yes", "latency-tracking-info-percentiles": "50 99 99.9"}
    client.config_resetstat()
    for number in range(50):
        client.set(f"k{number}", number)
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        client.execute_command("GET")
    client.config_get("maxclients")
    latencies = client.info("latencystats")
    assert set(latencies) == {"latency_percentiles_usec_set", "latency_percentiles_usec_config|get", "latency_percentiles_usec_config|resetstat"}, (
        "only commands that ran: GET was refused"
    )
    set_latencies = latencies["latency_percentiles_usec_set"]
    assert set(set_latencies) == {"p50", "p99", "p99.9"}
    assert 0 < set_latencies["p50"] <= set_latencies["p99"] <= set_latencies["p99.9"] < 10_000_000
    raw = raw_exchange(server.port, b"INFO latencystats\r\nQUIT\r\n").decode()
    assert re.search(r"^latency_percentiles_usec_set:p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}\r$", raw, re.MULTILINE), raw
    assert "latency_percentiles_usec_set" in client.info("everything")
    assert not any(name.startswith("latency_percentiles") for name in client.info()), "not a default section, as in Redis"
    histograms = client.execute_command("LATENCY", "HISTOGRAM", "set", "get", "nosuch")
    assert histograms[0] == "set" and len(histograms) == 2, "GET never ran; unknown names are skipped"
    fields = dict(zip(histograms[1][::2], histograms[1][1::2]))
    assert fields["calls"] == 50
    steps = fields["histogram_usec"]
    bounds, cumulative = steps[::2], steps[1::2]
    assert bounds == sorted(bounds) and cumulative == sorted(cumulative) and cumulative[-1] == 50, steps
    # Steps double from about a microsecond (Redis's 1, 2, 4, 8, 16, 33, 66, …).
    assert bounds[0] >= 1 and all(abs(math.log2(high / low) - round(math.log2(high / low))) < 0.05 for low, high in zip(bounds, bounds[1:])), bounds
    assert "no events are sampled" in client.execute_command("LATENCY", "DOCTOR")
    client.config_resetstat()
    assert set(client.info("latencystats")) == {"latency_percentiles_usec_config|resetstat"}
    # Turned off, nothing is recorded or reported; what was kept comes back when turned on.
    assert client.config_set("latency-tracking", "no")
    client.set("k", "v")
    assert client.info("latencystats") == {}
    assert client.config_set("latency-tracking", "yes")
    recorded = {name.removeprefix("latency_percentiles_usec_") for name in client.info("latencystats")}
    assert recorded == {"config|resetstat", "info", "config|set"}, "SET, run while tracking was off, is not there"


def test_commands_refused_before_auth_are_rejected_calls(make_server):
    server = make_server("--requirepass", "secret")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as stranger:
        stranger.sendall(b"GET k\r\n")
        assert stranger.recv(1000) == b"-NOAUTH Authentication required.\r\n"
    client = server.client(password="secret")
    assert calls(client, "get") == (0, 1, 0)
    assert client.info("errorstats")["errorstat_NOAUTH"] == {"count": 1}


def test_errorstats_count_error_replies_by_code_and_info_lists_them_by_default(make_server):
    metrics_port = free_port()
    server = make_server("--metrics-port", str(metrics_port))
    client = server.client()
    client.config_resetstat()
    client.set("s", "v")
    for _ in range(3):
        with pytest.raises(redis.ResponseError):
            client.hget("s", "f")
    with pytest.raises(redis.ResponseError):
        client.execute_command("NOSUCH")
    pipe = client.pipeline(transaction=True)
    pipe.hlen("s")
    pipe.execute(raise_on_error=False)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(b"*1\r\n$x\r\n")
        assert raw.recv(1000).startswith(b"-ERR Protocol error")
    info = client.info()
    assert info["errorstat_WRONGTYPE"] == {"count": 4}, "an error inside EXEC counts too"
    assert info["errorstat_ERR"] == {"count": 2}
    assert info["total_error_replies"] == 6 and info["total_error_replies_protocol"] == 1
    assert not any(name.startswith("cmdstat_") for name in info), "commandstats is not a default section"
    assert "cmdstat_hget" in client.info("all") and "cmdstat_hget" in client.info("everything")
    assert set(client.info("errorstats")) == {"errorstat_WRONGTYPE", "errorstat_ERR"}
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    assert 'hybridkv_command_calls_total{command="hget"} 3' in metrics
    assert 'hybridkv_command_failed_calls_total{command="hget"} 3' in metrics
    assert 'hybridkv_error_replies_by_prefix_total{prefix="WRONGTYPE"} 4' in metrics
    quantiles = re.findall(r'^hybridkv_command_latency_microseconds\{command="hget",quantile="([0-9.]+)"\} \d+\.\d{3}$', metrics, re.MULTILINE)
    assert quantiles == ["0.5", "0.99", "0.999"], metrics
    assert "hybridkv_error_replies_total 6" in metrics
    client.config_resetstat()
    assert client.info("errorstats") == {} and client.info("stats")["total_error_replies"] == 0


def slowlog_entries(client) -> list:
    """SLOWLOG GET -1 as raw lists: [id, unix seconds, microseconds, arguments, peer, name]."""
    return client.execute_command("SLOWLOG", "GET", "-1")


def test_slowlog_keeps_the_newest_slow_commands_with_bounded_redacted_arguments(make_server):
    server = make_server()
    client = server.client()
    assert client.config_get("slowlog-*") == {"slowlog-log-slower-than": "10000", "slowlog-max-len": "128"}
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    client.client_setname("tester")
    client.set("key", "x" * 200)
    client.delete(*[f"a{number}" for number in range(1, 35)])
    client.execute_command("CONFIG", "SET", "requirepass", "pw", "maxclients", "100")
    client.execute_command("AUTH", "pw")
    client.execute_command("HELLO", "2", "AUTH", "default", "pw", "SETNAME", "tester")
    pipe = client.pipeline(transaction=True)
    pipe.set("t", "1").get("t")
    pipe.execute()
    entries = slowlog_entries(client)
    assert client.slowlog_len() == len(entries) + 1, "SLOWLOG GET logged itself"
    arguments = [entry[3] for entry in entries]
    assert arguments[:4] == [["GET", "t"], ["SET", "t", "1"], ["MULTI"], ["HELLO", "2", "AUTH", "(redacted)", "(redacted)", "SETNAME", "tester"]], "EXEC itself is not logged"
    assert ["AUTH", "(redacted)"] in arguments
    assert ["CONFIG", "SET", "requirepass", "(redacted)", "maxclients", "100"] in arguments
    long_delete = next(entry for entry in arguments if entry[0] == "DEL")
    assert len(long_delete) == 32 and long_delete[-2:] == ["a30", "... (4 more arguments)"]
    assert ["SET", "key", "x" * 128 + "... (72 more bytes)"] in arguments
    newest = entries[0]
    ids = [entry[0] for entry in entries]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    assert abs(newest[1] - time.time()) < 60 and newest[2] >= 0
    assert newest[4] == client.client_info()["addr"] and newest[5] == "tester"
    assert len(client.execute_command("SLOWLOG", "GET")) == 10
    assert len(client.execute_command("SLOWLOG", "GET", "2")) == 2
    client.config_set("slowlog-max-len", 3)
    assert client.slowlog_len() == 3, "a shorter log drops its oldest entries at once"
    client.config_set("slowlog-log-slower-than", -1)
    client.slowlog_reset()
    client.set("quiet", "1")
    assert client.slowlog_len() == 0, "-1 logs nothing"
    client.config_set("slowlog-log-slower-than", 10_000_000)
    client.set("fast", "1")
    assert client.slowlog_len() == 0, "under the threshold"


def test_config_set_is_all_or_nothing_and_bounds_the_slowlog_length(make_server):
    client = make_server().client()
    with pytest.raises(redis.ResponseError, match=r"'slowlog-max-len'\) - argument must be between 0 and 100000 inclusive"):
        client.execute_command("CONFIG", "SET", "maxclients", "500", "slowlog-max-len", "100001")
    assert client.config_get("maxclients") == {"maxclients": "10000"}, "the valid pair was not applied"
    with pytest.raises(redis.ResponseError, match="duplicate parameter"):
        client.execute_command("CONFIG", "SET", "maxclients", "5", "MAXCLIENTS", "6")
    assert client.execute_command("CONFIG", "SET", "maxclients", "500", "slowlog-max-len", "100000")
    assert client.config_get("maxclients") == {"maxclients": "500"} and client.config_get("slowlog-max-len") == {"slowlog-max-len": "100000"}


def received(connection, seconds=0.3) -> bytes:
    """What arrives on a raw connection within `seconds` of quiet."""
    connection.settimeout(seconds)
    data = b""
    try:
        while chunk := connection.recv(65536):
            data += chunk
    except socket.timeout:
        pass
    return data


def test_monitor_streams_the_commands_that_ran_until_reset(make_server):
    server = make_server()
    client = server.client()
    address = client.client_info()["addr"]
    monitor = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    monitor.sendall(b"MONITOR\r\n")
    assert received(monitor) == b"+OK\r\n"
    assert [client["flags"] for client in client.client_list()].count("O") == 1, "CLIENT LIST flags the monitor"
    assert received(monitor, 0.2) == b"", "CLIENT LIST is hidden, as Redis hides its admin subcommands"
    client.client_id()
    assert received(monitor).endswith(b'"CLIENT" "ID"\r\n')
    client.set("k", 'a b"c\n')
    client.config_get("maxclients")
    client.execute_command("LATENCY", "LATEST")
    client.execute_command("CLIENT", "PAUSE", "0")
    pipe = client.pipeline(transaction=True)
    pipe.set("x", "1")
    pipe.execute()
    with pytest.raises(redis.ResponseError):
        client.execute_command("GET")
    lines = received(monitor).decode().splitlines()
    commands = [line.split("] ", 1)[1] for line in lines]
    assert commands == ['"SET" "k" "a b\\"c\\n"', '"MULTI"', '"SET" "x" "1"', '"EXEC"'], "CONFIG, LATENCY and CLIENT PAUSE hidden, a refused GET not run"
    assert all(line.startswith("+") and f"[0 {address}]" in line for line in lines)
    assert abs(float(lines[0][1:].split()[0]) - time.time()) < 60
    # A monitoring connection answers PING, ignores MONITOR and refuses the rest, until RESET.
    monitor.sendall(b"GET k\r\nMONITOR\r\nPING\r\n")
    assert received(monitor).startswith(b"-ERR Replica can't interact with the keyspace\r\n+PONG\r\n")
    monitor.sendall(b"RESET\r\nGET k\r\n")
    assert received(monitor) == b'+RESET\r\n$6\r\na b"c\n\r\n'
    assert "O" not in {client["flags"] for client in client.client_list()}
    client.set("after", "1")
    assert received(monitor, 0.2) == b"", "no longer monitoring"
    monitor.sendall(b"MULTI\r\nMONITOR\r\nDISCARD\r\nQUIT\r\n")
    assert received(monitor) == b"+OK\r\n-ERR Command not allowed inside a transaction\r\n+OK\r\n+OK\r\n"


def test_a_monitor_that_does_not_read_is_disconnected_and_the_server_goes_on(make_server):
    server = make_server("--durability", "none")
    monitor = socket.socket()
    monitor.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    monitor.connect(("127.0.0.1", server.port))
    monitor.sendall(b"MONITOR\r\n")
    client = server.client()
    value = "v" * 4096
    for batch in range(16):
        pipe = client.pipeline(transaction=False)
        for number in range(1000):
            pipe.set(f"k{number}", value)
        pipe.execute()
    assert client.dbsize() == 1000
    # Reading what the kernel buffered ends in EOF: the server closed the connection.
    monitor.settimeout(10)
    while monitor.recv(1 << 20):
        pass
    monitor.close()
    assert "monitoring client fell too far behind" in server.log()
