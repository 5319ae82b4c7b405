"""Lua scripting (EVAL, EVALSHA, SCRIPT) as clients use it: redis-py's Lock and registered
scripts, a script's writes atomic against other clients and durable as one batch, a runaway
script stopped at its time limit while other clients are served, and the keys a script may
reach. Replies and errors of each form are compared with redis-server in test_compare_redis.py
("scripting")."""

import threading
import time

import pytest
import redis

TRANSFER = """
local from, to = tonumber(redis.call('get', KEYS[1])), tonumber(redis.call('get', KEYS[2]))
redis.call('set', KEYS[1], from - ARGV[1])
redis.call('set', KEYS[2], to + ARGV[1])
return from + to
"""


def test_redis_py_locks_and_registered_scripts_work(r):
    lock = r.lock("resource", timeout=10)
    assert lock.acquire(blocking=False)
    assert not r.lock("resource", timeout=10).acquire(blocking=False), "held by the first"
    assert lock.extend(5)
    lock.release()
    assert r.exists("resource") == 0
    add = r.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    r.script_flush()
    assert add(keys=["counter"], args=[5]) == 5, "EVALSHA falls back to EVAL after NOSCRIPT"
    assert add(keys=["counter"], args=[2]) == 7
    assert r.script_exists(add.sha) == [True]


def test_a_script_is_atomic_against_other_clients(shared_server):
    setup = shared_server.client()
    setup.mset({"account:a": 1000, "account:b": 1000})
    errors = []

    def transfer(amount):
        client = shared_server.client()
        script = client.register_script(TRANSFER)
        for _ in range(300):
            if script(keys=["account:a", "account:b"], args=[amount]) != 2000:
                errors.append("a transfer saw a partial one")

    def audit():
        client = shared_server.client()
        for _ in range(300):
            total = client.eval("return redis.call('get', KEYS[1]) + redis.call('get', KEYS[2])", 2, "account:a", "account:b")
            if total != 2000:
                errors.append(f"total {total}")

    threads = [threading.Thread(target=transfer, args=(amount,)) for amount in (3, -5)] + [threading.Thread(target=audit)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert int(setup.get("account:a")) == 1000 - 300 * 3 + 300 * 5


def test_acknowledged_script_writes_survive_kill_9_together(make_server):
    server = make_server()
    client = server.client()
    for number in range(200):
        client.eval("redis.call('set', KEYS[1], ARGV[1]) redis.call('rpush', KEYS[2], ARGV[1])", 2, f"key{number}", "log", number)
    server.kill9()
    server.start()
    client = server.client()
    assert client.llen("log") == 200
    assert client.mget([f"key{number}" for number in range(200)]) == [str(number) for number in range(200)]


def test_a_runaway_script_is_stopped_and_others_are_served_meanwhile(shared_server):
    runaway = shared_server.client()
    other = shared_server.client()
    outcome = {}

    def run():
        started = time.monotonic()
        try:
            runaway.eval("while true do pcall(function() while true do end end) end", 0)
        except redis.ResponseError as error:
            outcome["error"] = str(error)
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)
    assert other.ping() and other.set("served", "yes"), "another client is served while the script runs"
    thread.join(timeout=30)
    assert "script ran for more than 5000 ms and was stopped" in outcome["error"]
    assert 4.5 < outcome["seconds"] < 20


def test_a_script_reaches_only_the_keys_it_declares(r):
    r.set("declared", "1")
    r.set("other", "2")
    with pytest.raises(redis.ResponseError, match="not declared in KEYS"):
        r.eval("return redis.call('get', 'other')", 1, "declared")
    with pytest.raises(redis.ResponseError, match="not declared in KEYS"):
        r.eval("return redis.call('get', 'other')", 0)
    assert r.eval("return redis.pcall('get', 'other')['err']", 1, "declared").startswith("ERR Script attempted")
    assert r.eval("return redis.call('get', KEYS[1])", 1, "declared") == "1"
    with pytest.raises(redis.ResponseError, match="not allowed from script"):
        r.eval("return redis.call('select', '1')", 0)
    with pytest.raises(redis.ResponseError, match="not enough memory"):
        # One allocation past the limit: a loop of small ones may meet the time limit first on a
        # loaded machine.
        r.eval("return #string.rep('x', 100 * 1024 * 1024)", 0)
    assert r.ping()


def test_scripts_share_a_state_that_no_script_can_change_for_the_next(r):
    # Each worker reuses one Lua state; it is built anew past 1,024 compiled scripts, when a
    # script left it holding much memory, and after SCRIPT FLUSH.
    for number in range(1100):
        assert r.eval(f"return {number}", 0) == number
    # 40 MiB held at the end of a script (of the 64 MiB a script may hold): the next one runs.
    held = "local t = {} for i = 1, 40 do t[i] = string.rep(string.char(64 + i), 1024 * 1024) end return #t"
    for _ in range(3):
        assert r.eval(held, 0) == 40
    for attempt in ["x = 1", "string.len = nil", "rawset(_G, 'x', 1)", "setmetatable(_G, nil)", "rawset(redis, 'call', 1)", "loadstring('y = 1')()"]:
        with pytest.raises(redis.ResponseError, match="Attempt to modify a readonly table"):
            r.eval(attempt, 0)
    sha = r.script_load("return string.len('abc') + #KEYS")
    assert r.evalsha(sha, 1, "k") == 4
    r.script_flush()
    with pytest.raises(redis.exceptions.NoScriptError):
        r.evalsha(sha, 1, "k")
    assert r.eval("return type(redis.call) .. type(rawget(_G, 'x'))", 0) == "functionnil"


def test_a_pipelined_script_reaches_only_its_keys_whatever_the_writes_around_it(r):
    # Pipelined single-key writes share one transaction; a script never joins one, or it could
    # reach the other writes' keys.
    pipe = r.pipeline(transaction=False)
    pipe.set("around", "1")
    pipe.eval("return redis.call('get', 'around')", 1, "mine")
    pipe.set("after", "2")
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] is True and replies[2] is True
    assert isinstance(replies[1], redis.ResponseError) and "not declared in KEYS" in str(replies[1])
