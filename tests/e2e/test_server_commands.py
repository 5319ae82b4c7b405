"""Connection and server commands: AUTH, HELLO/RESP3, SELECT over namespaces, INFO, metrics,
CONFIG, CLIENT, COMMAND, TIME, SAVE/BGSAVE/LASTSAVE, SHUTDOWN and SIGTERM, SCAN, expiry."""

import re
import socket
import threading
import subprocess
import time
import urllib.request

import pytest
import redis

from conftest import BINARY, free_port, raw_exchange


def raw_command(client, *arguments):
    """Sends a command and returns the parsed reply without redis-py's per-command callbacks."""
    connection = client.connection_pool.get_connection()
    try:
        connection.send_command(*arguments)
        return connection.read_response()
    finally:
        client.connection_pool.release(connection)


def test_auth_required_before_other_commands(make_server):
    server = make_server("--requirepass", "s3cret")
    assert raw_exchange(server.port, b"PING\r\n*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\nAUTH s3cret\r\nPING\r\nQUIT\r\n") == (
        b"-NOAUTH Authentication required.\r\n"
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        b"+OK\r\n+PONG\r\n+OK\r\n"
    )
    with pytest.raises(redis.AuthenticationError):
        server.client().get("k")
    # RESET deauthenticates where a password is required, as Redis (RESET itself needs no AUTH).
    assert raw_exchange(server.port, b"RESET\r\nAUTH s3cret\r\nSELECT 2\r\nRESET\r\nPING\r\nRESET\r\nQUIT\r\n") == (
        b"+RESET\r\n+OK\r\n+OK\r\n+RESET\r\n-NOAUTH Authentication required.\r\n+RESET\r\n+OK\r\n"
    )
    client = server.client(password="s3cret")
    assert client.set("k", "v") and client.get("k") == "v"
    assert server.client(username="default", password="s3cret", protocol=3).get("k") == "v"
    with pytest.raises(redis.AuthenticationError):
        server.client(username="other", password="s3cret").ping()


def test_unauthenticated_clients_get_small_limits(make_server):
    server = make_server("--requirepass", "pw")
    reply = raw_exchange(server.port, b"*11\r\n")
    assert reply == b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    reply = raw_exchange(server.port, b"*2\r\n$4\r\nAUTH\r\n$20000\r\n")
    assert reply == b"-ERR Protocol error: unauthenticated bulk length\r\n"


def test_protected_mode_refuses_open_non_loopback(tmp_path):
    result = subprocess.run(
        [str(BINARY), "serve", "--bind", "0.0.0.0", "--port", str(free_port()), "--dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=20,
    )
    assert result.returncode != 0
    assert "--requirepass" in result.stderr and "--protected-mode no" in result.stderr


def test_hello_switches_to_resp3(shared_server):
    raw = raw_exchange(shared_server.port, b"HELLO 3\r\nHSET h3 f v\r\nHGETALL h3\r\nGET nokey\r\nQUIT\r\n")
    assert raw.startswith(b"%7\r\n$6\r\nserver\r\n$8\r\nhybridkv\r\n")
    assert b"$5\r\nproto\r\n:3\r\n" in raw
    assert raw.endswith(b":1\r\n%1\r\n$1\r\nf\r\n$1\r\nv\r\n_\r\n+OK\r\n")
    client = shared_server.client(protocol=3)
    client.hset("h", mapping={"a": "1"})
    assert client.hgetall("h") == {"a": "1"}
    flat = raw_command(client, "HELLO", "2")
    assert flat[flat.index("proto") + 1] == 2


def test_select_chooses_a_namespace(make_server, tmp_path):
    config = tmp_path / "two.toml"
    config.write_text(
        'databases = 2\n'
        '[[namespace]]\nname = "first"\nindex_bytes = "16MiB"\ndata_bytes = "64MiB"\n'
        '[[namespace]]\nname = "second"\nindex = "dram"\ndata = "dram"\njournal = "ssd"\nindex_bytes = "16MiB"\ndata_bytes = "64MiB"\n'
    )
    server = make_server("--config", str(config))
    zero, one = server.client(db=0), server.client(db=1)
    zero.set("k", "zero")
    one.set("k", "one")
    assert zero.get("k") == "zero" and one.get("k") == "one"
    assert one.dbsize() == 1
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        zero.execute_command("SELECT", "2")
    info = zero.info("keyspace")
    assert info["db0"]["keys"] == 1 and info["db1"]["keys"] == 1
    one.flushdb()
    assert zero.get("k") == "zero" and one.dbsize() == 0
    zero.flushall()
    assert zero.dbsize() == 0


def test_sixteen_databases_by_default_each_opened_by_its_first_select(make_server):
    server = make_server()
    zero = server.client()
    assert zero.config_get("databases") == {"databases": "16"}
    assert "ns_db5_durability" not in zero.info("persistence"), "not opened before it is selected"
    five = server.client(db=5)
    five.set("k", "five")
    five.hset("h", mapping={"f": "v"})
    zero.set("k", "zero")
    assert five.get("k") == "five" and zero.get("k") == "zero" and five.dbsize() == 2
    assert server.client(db=15).dbsize() == 0
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        zero.execute_command("SELECT", "16")
    keyspace = zero.info("keyspace")
    assert keyspace["db5"]["keys"] == 2 and keyspace["db0"]["keys"] == 1 and "db15" not in keyspace
    assert zero.info("persistence")["ns_db5_durability"] == "always", "database 0's placement and durability"
    assert "opened on demand" in server.log()
    server.kill9()
    server.start()
    zero = server.client()
    assert zero.info("keyspace")["db5"]["keys"] == 2, "reopened at start"
    persistence = zero.info("persistence")
    assert "ns_db15_durability" in persistence and "ns_db7_durability" not in persistence, "selected before or not"
    assert server.client(db=5).hgetall("h") == {"f": "v"}
    zero.flushall()
    assert server.client(db=5).dbsize() == 0 and zero.dbsize() == 0


def test_clients_opening_every_database_at_once_each_keep_their_own_keys(make_server):
    server = make_server("--cache", "1MiB")
    errors = []

    def fill(number):
        try:
            client = server.client(db=number)
            client.mset({f"k{key}": f"db{number}:{key}" for key in range(200)})
            assert client.dbsize() == 200 and client.get("k7") == f"db{number}:7"
        except Exception as error:  # reported below, with the database it happened in
            errors.append((number, error))

    threads = [threading.Thread(target=fill, args=(number,)) for number in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    server.kill9()
    server.start()
    keyspace = server.client().info("keyspace")
    assert all(keyspace[f"db{number}"]["keys"] == 200 for number in range(16)), keyspace
    assert server.client(db=11).mget("k0", "k199") == ["db11:0", "db11:199"]


def test_crossing_moves_and_writes_leave_a_key_in_exactly_one_database(make_server):
    server = make_server()
    server.client().set("k", 0)
    errors = []

    def mover(source, target):
        client = server.client(db=source)
        for _ in range(150):
            try:
                client.move("k", target)
            except redis.ResponseError as error:
                # Documented: a key rewritten faster than a flush may not be movable.
                if "MOVE gave up after 8 attempts" not in str(error):
                    errors.append(error)

    def writer():
        client = server.client()
        try:
            for number in range(150):
                client.set("k", number, xx=True)  # never creates it, only rewrites it where it is
        except redis.ResponseError as error:
            errors.append(error)

    threads = [threading.Thread(target=mover, args=(0, 1)), threading.Thread(target=mover, args=(1, 0)), threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    held = [server.client(db=number).exists("k") for number in (0, 1)]
    assert sorted(held) == [0, 1], held


def test_the_number_of_databases_is_a_flag(make_server, tmp_path):
    server = make_server("--databases", "2")
    assert server.client().config_get("databases") == {"databases": "2"}
    assert server.client(db=1).set("k", "one")
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        server.client().execute_command("SELECT", "2")
    result = subprocess.run(
        [str(BINARY), "serve", "--databases", "65", "--port", str(free_port()), "--dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=20,
    )
    assert result.returncode != 0 and "databases = 65" in result.stderr, result.stderr


def test_a_database_past_a_lowered_count_is_kept_and_reported_not_opened(make_server):
    server = make_server()
    server.client(db=9).set("k", "nine")
    server.stop()
    server.extra_args += ["--databases", "4"]
    server.start()
    log = re.sub(r"\x1b\[[0-9;]*m", "", server.log())
    assert "past the last one" in log and "database=9" in log, log
    assert "db9" not in server.client().info("keyspace")
    server.stop()
    server.extra_args = server.extra_args[:-2]
    server.start()
    assert server.client(db=9).get("k") == "nine"


def test_info_sections(r):
    r.set("a", 1)
    r.get("a")
    r.get("missing")
    info = r.info("all")
    for field in ["redis_version", "connected_clients", "used_memory", "ns_default_index_tier", "ns_default_data_capacity_bytes",
                  "ns_default_durability", "ns_default_index_media", "ns_default_flushes_per_sec", "instantaneous_ops_per_sec",
                  "keyspace_hits", "keyspace_misses", "total_commands_processed"]:
        assert field in info, field
    assert info["ns_default_durability"] == "always"
    assert "msync fallback" in info["ns_default_index_media"] or "MAP_SYNC" in info["ns_default_index_media"]
    assert info["keyspace_hits"] >= 1 and info["keyspace_misses"] >= 1
    assert set(r.info("persistence")) >= {"ns_default_flushes", "ns_default_journal_writes", "rdb_last_save_time",
                                          "ns_default_rotations_waited_for_write_out", "ns_default_defrag_blocks_waiting",
                                          "ns_default_writes_held_for_backlog", "ns_default_records_awaiting_publication",
                                          "ns_default_writes_held_for_space"}
    # Durability `always`: every write waits for its flush anyway, none is held for a backlog.
    assert r.info("persistence")["ns_default_writes_held_for_backlog"] == 0
    assert "connected_clients" not in r.info("persistence")
    memory = r.info("memory")
    assert memory["ns_default_cache_entries"] >= 1 and memory["ns_default_cache_capacity_bytes"] > 0
    # A primary without replicas, as tools and client libraries look for it; CPU time as Redis prints it.
    replication = r.info("replication")
    assert replication["role"] == "master" and replication["connected_slaves"] == 0 and replication["master_replid"] == info["run_id"]
    assert r.execute_command("ROLE") == ["master", 0, []]
    assert r.info("cluster") == {"cluster_enabled": 0}
    cpu = r.info("cpu")
    assert set(cpu) == {"used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"}
    assert cpu["used_cpu_user"] + cpu["used_cpu_sys"] > 0
    headers = raw_exchange(r.connection_pool.connection_kwargs["port"], b"INFO\r\nQUIT\r\n").decode().splitlines()
    assert [line for line in headers if line.startswith("#")] == [
        "# Server", "# Clients", "# Memory", "# Persistence", "# Stats", "# Replication", "# CPU", "# Modules", "# Errorstats", "# Cluster", "# Keyspace"]
    everything = raw_exchange(r.connection_pool.connection_kwargs["port"], b"INFO everything\r\nQUIT\r\n").decode().splitlines()
    assert [line for line in everything if line.startswith("#")] == [
        "# Server", "# Clients", "# Memory", "# Persistence", "# Stats", "# Replication", "# CPU", "# Modules", "# Commandstats", "# Errorstats",
        "# Latencystats", "# Cluster", "# Keyspace"], "Redis 7.0's order"


def test_info_keyspace_counts_keys_with_an_expiry_and_estimates_their_ttl(make_server):
    """INFO keyspace's keys, expires and avg_ttl, and INFO stats' expired_keys, through every
    command that gives or takes an expiry, and across a clean and a kill -9 restart."""
    server = make_server("--durability", "periodic")
    client = server.client()
    client.mset({f"plain:{n}": n for n in range(1000)})
    for n in range(2000):
        client.set(f"ttl:{n}", n, ex=1000)
    client.set("px", 1, px=500_000)
    client.expire("plain:0", 100)
    client.persist("ttl:0")
    client.set("ttl:1", "no ttl now")  # SET without KEEPTTL drops the expiry
    client.set("ttl:2", "kept", keepttl=True)
    client.getex("plain:1", ex=50)
    client.delete("ttl:3")
    client.set("short", 1, px=1)
    client.hset("hash", mapping={"f": "v"})
    client.expire("hash", 300)
    expected = 2000 - 3 + 1 + 2 + 1 + 1  # ttl:* less 0, 1, 3; px; plain:0, plain:1; short; hash
    line = client.info("keyspace")["db0"]
    assert (line["keys"], line["expires"]) == (1000 + 1999 + 3, expected), line
    # The expiry sweep's samples give the estimate within a few housekeeping rounds.
    deadline = time.monotonic() + 20
    while client.info("keyspace")["db0"]["avg_ttl"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    average = client.info("keyspace")["db0"]["avg_ttl"]
    assert 50_000 <= average <= 1_000_000, average
    # "short" expires and is reclaimed: both counts drop, as in Redis.
    deadline = time.monotonic() + 20
    while client.info("keyspace")["db0"]["expires"] == expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.info("keyspace")["db0"]["expires"] == expected - 1
    stats = client.info("stats")
    assert (stats["expired_keys"], stats["evicted_keys"]) == (1, 0), "reclaimed ones are counted"
    client.get("plain:5")
    client.get("missing")
    assert client.config_resetstat()
    stats = client.info("stats")
    assert (stats["expired_keys"], stats["keyspace_hits"], stats["keyspace_misses"]) == (0, 0, 0), "as Redis's RESETSTAT"
    for restart in (server.restart, lambda: (server.kill9(), server.start())):
        restart()
        line = server.client().info("keyspace")["db0"]
        assert (line["keys"], line["expires"]) == (1000 + 1999 + 3 - 1, expected - 1), line
    client = server.client()
    client.flushdb()
    assert "db0" not in client.info("keyspace")
    client.set("again", 1, ex=10)
    assert client.info("keyspace")["db0"]["expires"] == 1


def test_metrics_endpoint(make_server):
    metrics_port = free_port()
    server = make_server("--metrics-port", str(metrics_port))
    server.client().set("k", "v")
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    assert "hybridkv_commands_processed_total" in body
    assert re.search(r'^hybridkv_cpu_seconds_total\{mode="user"\} \d+\.\d{6}$', body, re.MULTILINE)
    assert 'hybridkv_keys{namespace="default"} 1' in body
    assert 'hybridkv_keys_with_expiry{namespace="default"} 0' in body
    assert 'hybridkv_expired_keys_total{namespace="default"} 0' in body
    assert 'hybridkv_tier_capacity_bytes{namespace="default",role="data",tier="ssd"' in body
    assert 'hybridkv_cache_entries{namespace="default"} 1' in body
    assert 'hybridkv_cache_capacity_bytes{namespace="default"} 268435456' in body
    assert 'hybridkv_defragmented_blocks_total{namespace="default"} 0' in body
    assert 'hybridkv_defrag_blocks_waiting{namespace="default"} 0' in body
    assert 'hybridkv_writes_held_for_backlog_total{namespace="default"} 0' in body
    assert 'hybridkv_writes_held_for_space_total{namespace="default"} 0' in body
    assert 'hybridkv_records_awaiting_publication{namespace="default"}' in body


def test_config_get_and_set(r):
    assert r.config_get("maxclients") == {"maxclients": "10000"}
    assert r.config_get("appendfsync")["appendfsync"] == "always"
    assert r.config_set("maxclients", 500)
    assert r.config_get("max*") == {"maxclients": "500", "maxmemory": "0"}
    r.config_set("maxclients", 10000)
    with pytest.raises(redis.ResponseError, match="can't set immutable config"):
        r.config_set("port", 1)
    assert r.config_resetstat()


def test_client_commands(r, shared_server):
    assert r.client_setname("worker-1")
    assert r.client_getname() == "worker-1"
    assert r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib") == "OK"
    with pytest.raises(redis.ResponseError, match="Unrecognized option 'BAD'"):
        r.execute_command("CLIENT", "SETINFO", "BAD", "x")
    own_id = r.client_id()
    listed = {client["id"]: client for client in r.client_list()}
    assert listed[str(own_id)]["name"] == "worker-1"
    assert listed[str(own_id)]["lib-name"] == "mylib"
    # redis-py 8 speaks RESP3 unless told otherwise.
    assert (listed[str(own_id)]["flags"], listed[str(own_id)]["multi"], listed[str(own_id)]["resp"]) == ("N", "-1", "3")
    # A command with subcommands is named with its subcommand, as in Redis 7.
    assert listed[str(own_id)]["cmd"] == "client|list"
    assert " cmd=client|info " in r.execute_command("CLIENT", "INFO")
    r.config_get("maxclients")
    observer = shared_server.client(decode_responses=True)
    assert observer.client_list(client_id=[own_id])[0]["cmd"] == "config|get"
    r.get("any")
    assert observer.client_list(client_id=[own_id])[0]["cmd"] == "get"
    observer.close()
    assert [client["id"] for client in r.client_list(client_id=[own_id, 999999, own_id])] == [str(own_id)] * 2
    assert r.client_list(_type="normal") == r.client_list() and r.client_list(_type="pubsub") == []
    for arguments, error in [(["TYPE", "bogus"], "Unknown client type 'bogus'"), (["ID", "x"], "Invalid client ID"), (["ID"], "syntax error"),
                             (["TYPE"], "syntax error"), (["TYPE", "normal", "x"], "syntax error")]:
        with pytest.raises(redis.ResponseError, match=f"^{error}$"):
            r.execute_command("CLIENT", "LIST", *arguments)
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=5) as other:
        other.sendall(b"HELLO 3\r\nMULTI\r\nSET a 1\r\nGET a\r\n")
        other_id = None
        deadline = time.time() + 5
        while time.time() < deadline:
            line = next((line for line in r.execute_command("CLIENT", "LIST").splitlines() if " multi=2 " in line), None)
            if line:
                other_id = line.split()[0]
                break
            time.sleep(0.01)
        assert other_id and " flags=x " in line and " resp=3 " in line, line
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=5) as victim:
        victim.sendall(b"CLIENT ID\r\n")
        victim_id = int(victim.recv(100)[1:-2])
        assert r.client_list(client_id=[victim_id])[0]["resp"] == "2"
        assert r.client_kill_filter(_id=victim_id) == 1
        assert victim.recv(100) == b"", "a killed client's connection is closed"
    with pytest.raises(redis.ResponseError, match="No such client"):
        r.client_kill("127.0.0.1:1")
    # Client-side caching: tests/e2e/test_tracking.py has the invalidations.
    assert r.execute_command("CLIENT", "TRACKING", "ON", "BCAST") == "OK"
    assert " flags=tB " in r.execute_command("CLIENT", "INFO")
    assert r.execute_command("CLIENT", "TRACKING", "OFF") == "OK"
    assert " flags=N " in r.execute_command("CLIENT", "INFO")
    assert r.ping()


def test_command_introspection(r):
    count = r.command_count()
    assert count >= 70
    info = raw_command(r, "COMMAND", "INFO", "get", "mset", "nosuch")
    assert info[0][0] == "get" and info[0][1] == 2 and info[1][3:6] == [1, -1, 2] and info[2] is None
    docs = raw_command(r, "COMMAND", "DOCS", "set")
    assert "set" in str(docs)
    assert r.command_getkeys("MSET", "a", "1", "b", "2") == ["a", "b"]
    assert len(r.command()) == count
    # Subcommands are listed, described and documented as `container|sub`, as in Redis 7.
    listed = raw_command(r, "COMMAND", "LIST")
    assert len(listed) > count and "get" in listed and "client|list" in listed and "config|get" in listed
    assert raw_command(r, "COMMAND", "LIST", "FILTERBY", "PATTERN", "CLIENT|LIS*") == ["client|list"]
    assert raw_command(r, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "hyperloglog") == ["pfadd", "pfcount", "pfmerge"]
    assert raw_command(r, "COMMAND", "LIST", "FILTERBY", "MODULE", "any") == []
    info = raw_command(r, "COMMAND", "INFO", "client|list", "CLIENT|nosuch", "nosuch|list")
    assert info[0][:2] == ["client|list", -2] and info[1] is None and info[2] is None
    assert "client|list" in str(raw_command(r, "COMMAND", "DOCS", "client|list"))


def test_help_lists_the_subcommands_that_the_unknown_subcommand_error_points_to(r):
    for command in ("CLIENT", "CONFIG", "COMMAND", "MEMORY", "LATENCY", "SLOWLOG"):
        with pytest.raises(redis.ResponseError, match=rf"^unknown subcommand 'NOSUCH'\. Try {command} HELP\."):
            raw_command(r, command, "NOSUCH")
        lines = raw_command(r, command, "HELP")
        assert lines[0] == f"{command} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
        assert lines[-2] == "HELP" and lines[-1] in ("    Print this help.", "    Prints this help."), "Redis words both"
        names = [line.split()[0] for line in lines[1::2]]
        assert all(line.startswith("    ") for line in lines[2::2]) and len(names) >= 2
        for name in names:
            try:
                raw_command(r, command, name)
            except redis.ResponseError as error:
                assert "unknown subcommand" not in str(error), f"{command} HELP lists {name}"
    with pytest.raises(redis.ResponseError, match=r"^wrong number of arguments for 'client\|help' command"):
        raw_command(r, "CLIENT", "HELP", "extra")


def wait_for_background_checkpoint(r):
    deadline = time.time() + 10
    while r.info("persistence")["rdb_bgsave_in_progress"] and time.time() < deadline:
        time.sleep(0.05)
    assert r.info("persistence")["rdb_bgsave_in_progress"] == 0


def test_time_save_bgsave_bgrewriteaof_lastsave(r):
    seconds, micros = r.time()
    assert abs(seconds - time.time()) < 5 and 0 <= micros < 1_000_000
    before = r.lastsave()
    time.sleep(1.1)
    r.set("k", "v")
    assert r.save()
    assert r.lastsave() > before
    assert r.bgsave()
    wait_for_background_checkpoint(r)
    # BGREWRITEAOF checkpoints too: that is what compacts the journal here.
    before = r.lastsave()
    time.sleep(1.1)
    r.set("k", "w")
    assert raw_command(r, "BGREWRITEAOF") == "Background append only file rewriting started"
    wait_for_background_checkpoint(r)
    assert r.lastsave() > before
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'bgrewriteaof'"):
        raw_command(r, "BGREWRITEAOF", "x")


def test_scan_covers_every_key_once_with_filters(r):
    for i in range(300):
        r.set(f"user:{i}", i)
    r.hset("hash:1", "f", "v")
    seen = list(r.scan_iter(count=25))
    assert len(seen) == 301 and set(seen) == {f"user:{i}" for i in range(300)} | {"hash:1"}
    assert set(r.scan_iter(match="user:1?", count=50)) == {f"user:{i}" for i in range(10, 20)}
    assert list(r.scan_iter(_type="hash")) == ["hash:1"]
    assert r.randomkey() in set(seen)


def test_expiry_takes_effect(r):
    r.set("short", "v", px=150)
    assert 0 < r.pttl("short") <= 150
    assert r.get("short") == "v"
    time.sleep(0.3)
    assert r.get("short") is None and r.exists("short") == 0 and r.ttl("short") == -2
    r.set("later", "v", ex=100)
    assert 99 <= r.ttl("later") <= 100


def test_shutdown_closes_cleanly_and_restart_is_warm(make_server):
    server = make_server()
    client = server.client()
    client.set("kept", "yes")
    client.shutdown()  # redis-py treats the closed connection as success
    assert server.process.wait(timeout=20) == 0
    assert "database closed cleanly" in server.log()
    server.start()
    assert server.client().get("kept") == "yes"
    assert server.client().info("persistence")["ns_default_restart"] == "warm"


def test_sigterm_finishes_and_closes_cleanly(make_server):
    server = make_server()
    server.client().set("kept", "yes")
    assert server.stop() == 0
    assert "database closed cleanly" in server.log()
    server.start()
    assert server.client().get("kept") == "yes"


def test_bitfield_writes_keep_the_ttl_abort_watchers_and_survive_a_kill(make_server):
    server = make_server()
    client = server.client(decode_responses=False)
    assert client.execute_command("BITFIELD", "counters", "INCRBY", "u16", "#0", "7", "INCRBY", "i16", "#1", "-3") == [7, -3]
    client.expire("counters", 1000)
    assert client.execute_command("BITFIELD", "counters", "OVERFLOW", "SAT", "INCRBY", "u16", "#0", "70000") == [65535]
    assert 990 < client.ttl("counters") <= 1000, "a BITFIELD write keeps the key's expiry"
    assert client.get("counters") == b"\xff\xff\xff\xfd"
    # A write aborts a transaction watching the key, even when FAIL refused its change (as Redis).
    pipe = server.client().pipeline(transaction=True)
    pipe.watch("counters")
    assert client.execute_command("BITFIELD", "counters", "OVERFLOW", "FAIL", "INCRBY", "u16", "#0", "1") == [None]
    pipe.multi()
    pipe.set("other", "1")
    with pytest.raises(redis.WatchError):
        pipe.execute()
    # BITFIELD_RO runs where only reads may (a read-only command) and inside MULTI.
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("BITFIELD_RO", "counters", "GET", "u16", "#0").execute_command("BITFIELD", "counters", "INCRBY", "i16", "#1", "1")
    assert pipe.execute() == [[65535], [-2]]
    server.kill9()
    server.start()
    assert server.client(decode_responses=False).get("counters") == b"\xff\xff\xff\xfe"


CLIENT_REPLY_EXCHANGES = [
    b"CLIENT REPLY OFF\r\nSET reply:a 1\r\nGET reply:a\r\nNOSUCH\r\nCLIENT REPLY ON\r\nGET reply:a\r\n",
    b"CLIENT REPLY SKIP\r\nGET reply:a\r\nPING\r\nCLIENT REPLY SKIP\r\nNOSUCH\r\nECHO x\r\n",
    b"CLIENT REPLY OFF\r\nCLIENT REPLY SKIP\r\nPING\r\nCLIENT REPLY ON\r\nPING\r\n",
    b"CLIENT REPLY MAYBE\r\nCLIENT REPLY\r\nCLIENT REPLY OFF\r\nRESET\r\nPING\r\n",
    b"CLIENT REPLY OFF\r\n" + b"".join(b"SET reply:k%d v\r\n" % n for n in range(200)) + b"CLIENT REPLY ON\r\nMGET reply:k0 reply:k199\r\n",
    b"CLIENT REPLY SKIP\r\nMULTI\r\nSET reply:t 1\r\nEXEC\r\n",
]


@pytest.mark.parametrize("exchange", range(len(CLIENT_REPLY_EXCHANGES)))
def test_client_reply_drops_replies_as_redis_does(shared_server, reference_redis, exchange):
    """Replies dropped by CLIENT REPLY OFF or SKIP, byte for byte as Redis (pipelined writes are
    not grouped while replies are off, and every one of them is still written)."""
    payload = CLIENT_REPLY_EXCHANGES[exchange] + b"QUIT\r\n"
    assert raw_exchange(shared_server.port, payload) == raw_exchange(reference_redis, payload)
