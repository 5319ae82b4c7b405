"""Redis's own tools against hybridkv: redis-cli (interactive and --pipe) and redis-benchmark."""

import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import termios
import time

import pytest

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-tools not installed (scripts/setup-python.sh)")


def drive_interactive(port: int, lines, timeout: float = 10.0) -> str:
    """Runs redis-cli on a pseudo-terminal (so it is in interactive mode) and types `lines`."""
    pid, terminal = pty.fork()
    if pid == 0:
        # A terminal with a size: without one, redis-cli's line editor asks the terminal for the
        # cursor position and takes the typed commands for the answer.
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
        os.execvp("redis-cli", ["redis-cli", "-p", str(port)])
    output = b""

    def read_until_prompt():
        nonlocal output
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([terminal], [], [], 0.1)
            if ready:
                try:
                    output += os.read(terminal, 65536)
                except OSError:
                    return
                if output.rstrip().endswith(b">"):
                    return

    read_until_prompt()
    for line in lines:
        os.write(terminal, line.encode() + b"\r")
        read_until_prompt()
    os.write(terminal, b"quit\r")
    read_until_prompt()
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"redis-cli did not exit after quit; it printed: {output!r}")
        time.sleep(0.05)
    os.close(terminal)
    return output.decode(errors="replace")


def test_redis_cli_interactive(shared_server):
    output = drive_interactive(shared_server.port, ["set greeting hello", "get greeting", "hset h f 1", "hgetall h", "incr greeting", "nosuch"])
    assert f"127.0.0.1:{shared_server.port}>" in output
    assert "OK" in output and '"hello"' in output
    assert '1) "f"' in output and '2) "1"' in output
    assert "(error) ERR value is not an integer or out of range" in output
    assert "(error) ERR unknown command 'nosuch'" in output


def test_redis_cli_pipe_bulk_load(shared_server):
    client = shared_server.client()
    client.flushdb()
    keys = 5000
    payload = "".join(f"*3\r\n$3\r\nSET\r\n${len(f'bulk:{i}')}\r\nbulk:{i}\r\n${len(str(i))}\r\n{i}\r\n" for i in range(keys))
    result = subprocess.run(["redis-cli", "-p", str(shared_server.port), "--pipe"], input=payload.encode(), capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    summary = result.stdout.decode()
    assert re.search(rf"errors: 0, replies: {keys}", summary), summary
    assert client.dbsize() == keys and client.get("bulk:4321") == "4321"


def test_redis_cli_one_shot_commands(shared_server):
    run = lambda *arguments: subprocess.run(["redis-cli", "-p", str(shared_server.port), *arguments], capture_output=True, text=True, timeout=30).stdout
    assert run("set", "cli", "value").strip() == "OK"
    assert run("get", "cli").strip() == "value"
    assert "redis_version:" in run("info", "server")


def test_redis_benchmark_runs_without_errors(shared_server):
    result = subprocess.run(
        ["redis-benchmark", "-p", str(shared_server.port), "-t", "set,get,incr,mset,hset", "-n", "2000", "-c", "10", "-q", "--csv"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith('"') and not line.startswith('"test"')]
    tests = {row.split(",")[0].strip('"') for row in rows}
    assert {"SET", "GET", "INCR", "HSET"} <= tests and any(test.startswith("MSET") for test in tests), result.stdout
    for row in rows:
        assert float(row.split(",")[1].strip('"')) > 0, row
    assert "error" not in (result.stdout + result.stderr).lower()
