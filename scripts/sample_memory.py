#!/usr/bin/env python3
"""Samples a running `hybridkv serve` every few seconds until it exits: what its resident memory is
made of, for telling a leak from the allocator or the kernel (docs/RELIABILITY.md, "Soak").

    scripts/sample_memory.py target/release/hybridkv /tmp/memory.txt &
    flock /tmp/hybridkv-bench.lock .venv/bin/python scripts/soak.py ...

Waits for a process whose command line is `BINARY serve ...`, then writes one line per sample:
seconds since the first, VmRSS, RssAnon and RssFile (KiB), threads, thread ids seen so far (more
than the thread count means threads were replaced), Rss and AnonHugePages (KiB) of the largest
anonymous mapping (mimalloc's arena), the system's khugepaged collapses (/proc/vmstat
thp_collapse_alloc, all processes), and the server's INFO used_memory and defragmented_blocks.
"""

import argparse
import os
import re
import subprocess
import time
from pathlib import Path

ANONYMOUS_FIELDS_MAX = 5  # an address range line without a path has five fields


def find_server(binary: str):
    while True:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if command[0] == binary and command[1:2] == ["serve"]:
                return int(entry.name), command
        time.sleep(0.5)


def field_kib(text: str, name: str) -> int:
    return int(re.search(rf"^{name}:\s+(\d+)", text, re.M).group(1))


def largest_anonymous_mapping(smaps: str) -> tuple:
    """(Rss, AnonHugePages) in KiB of the anonymous mapping with the most resident memory."""
    best = (0, 0)
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", smaps):
        fields = block.split("\n", 1)[0].split()
        if len(fields) <= ANONYMOUS_FIELDS_MAX:
            best = max(best, (field_kib(block, "Rss"), field_kib(block, "AnonHugePages")))
    return best


def collapses() -> int:
    text = Path("/proc/vmstat").read_text()
    return int(re.search(r"^thp_collapse_alloc (\d+)", text, re.M).group(1))


def server_info(port: str) -> str:
    try:
        text = subprocess.run(["redis-cli", "-p", port, "info"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "- -"
    values = dict(line.strip().split(":", 1) for line in text.splitlines() if line.startswith(("used_memory:", "defragmented_blocks:")))
    return f"{values.get('used_memory', '-')} {values.get('defragmented_blocks', '-')}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", help="the server binary's path as the server was started with it")
    parser.add_argument("output")
    parser.add_argument("--seconds-between", type=float, default=10)
    args = parser.parse_args()
    pid, command = find_server(os.path.abspath(args.binary))
    port = command[command.index("--port") + 1] if "--port" in command else "6379"
    began, thread_ids = time.monotonic(), set()
    with open(args.output, "w") as output:
        output.write(f"# pid {pid}: {' '.join(command)}\n")
        output.write("seconds rss_kib anon_kib file_kib threads thread_ids_seen arena_rss_kib arena_huge_kib thp_collapse_alloc used_memory defragmented_blocks\n")
        while True:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                smaps = Path(f"/proc/{pid}/smaps").read_text()
                thread_ids.update(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                break  # the server exited
            arena_rss, arena_huge = largest_anonymous_mapping(smaps)
            output.write(
                f"{time.monotonic() - began:.0f} {field_kib(status, 'VmRSS')} {field_kib(status, 'RssAnon')} {field_kib(status, 'RssFile')} "
                f"{field_kib(status, 'Threads')} {len(thread_ids)} {arena_rss} {arena_huge} {collapses()} {server_info(port)}\n"
            )
            output.flush()
            time.sleep(args.seconds_between)


if __name__ == "__main__":
    main()
