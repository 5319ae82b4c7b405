#!/usr/bin/env python3
"""Crash loop through the server: for each placement, a write load with durability `always`,
SIGKILL at a random moment, restart, and a check that every acknowledged write is there with its
latest acknowledged value (or the value of the one write still in flight when the server died).

    .venv/bin/python scripts/crash_loop.py --cycles 20 --seconds 900 --placements all --seed 1

Each writer connection owns its keys and sends one command at a time (SET, INCR, MSET, DEL,
MULTI/EXEC; RPUSH, LPOP and LMOVE on lists that grow past one record into chunks; SADD and SREM
on sets; ZADD, ZINCRBY and ZPOPMIN on sorted sets that grow into buckets; XADD (some trimming),
XDEL, XREADGROUP and XACK on streams with a consumer group), or a pipeline of pushes and pops on
one list, or of ZADD, ZINCRBY and ZPOPMIN on one sorted set (which the server runs in groups that keep the
value open from one command to the next),
so the latest acknowledged value of every key is known, and at most one write (or pipeline) per
writer is in flight at the kill. A write in flight may be applied or not, a pipeline in flight
any prefix of it, but a multi-key write (MSET, MULTI/EXEC, LMOVE) is applied whole or not at all. Some cycles also kill the server while it is
still recovering. The seed fixes the schedule: every kill delay and every writer's sequence of
commands (not the interleaving of the writers' threads). Exit status 1 when anything was lost.
"""

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from conftest import PLACEMENTS, Server  # noqa: E402

WRITERS_DEFAULT = 6
KEYS_PER_WRITER = 500
COUNTERS_PER_WRITER = 4
LISTS_PER_WRITER = 2
SETS_PER_WRITER = 2
SORTED_SETS_PER_WRITER = 2
STREAMS_PER_WRITER = 2
# Entries an XADD that trims keeps at most.
STREAM_ENTRIES_KEPT = 300
# Sorted-set scores are drawn from this many integers, so that members tie (ordered by member).
SCORES_DISTINCT = 100
VALUE_PADDING_BYTES_MAX = 300
MGET_KEYS_PER_CALL = 1000
# Share of cycles that also kill the server once while it recovers, before it listens.
RECOVERY_KILL_PROBABILITY = 0.2
RECOVERY_KILL_DELAY_SECONDS_MAX = 0.05
# Bigger than the e2e default so a long run's overwrites never fill the data tier.
SERVER_SIZES = ("--index-bytes", "32MiB", "--data-bytes", "256MiB")
# The errors a client sees when the server is killed under it.
SERVER_GONE = (redis.ConnectionError, redis.TimeoutError, ConnectionResetError, BrokenPipeError)


def parse_placements(text: str) -> list:
    """`all`, or a comma-separated list of index/data pairs such as `pmem/ssd,dram/dram`."""
    if text == "all":
        return list(PLACEMENTS)
    placements = [tuple(pair.split("/")) for pair in text.split(",")]
    unknown = [pair for pair in placements if pair not in PLACEMENTS]
    if unknown:
        raise SystemExit(f"unknown placements {unknown}; expected index/data with index in dram|shmem|pmem, data in dram|pmem|ssd")
    return placements


class Writer:
    """One connection's worth of writes to keys only it writes, one command at a time.

    `expected` maps every key the writer owns to its latest acknowledged value (None: absent);
    `in_flight` holds the changes of the command sent but not acknowledged when the server died."""

    def __init__(self, number: int, seed: int):
        self.number = number
        self.rng = random.Random(seed)
        self.keys = [f"w{number}:k{i}" for i in range(KEYS_PER_WRITER)]
        self.counters = [f"w{number}:counter{i}" for i in range(COUNTERS_PER_WRITER)]
        self.lists = [f"w{number}:list{i}" for i in range(LISTS_PER_WRITER)]
        self.sets = [f"w{number}:set{i}" for i in range(SETS_PER_WRITER)]
        self.sorted_sets = [f"w{number}:zset{i}" for i in range(SORTED_SETS_PER_WRITER)]
        self.streams = [f"w{number}:stream{i}" for i in range(STREAMS_PER_WRITER)]
        # Strings as text, lists as tuples, sets as frozensets, sorted sets as tuples of
        # (member, score) in Redis's order, streams as `StreamState`; None: absent.
        self.expected = dict.fromkeys(self.keys + self.counters + self.lists + self.sets + self.sorted_sets + self.streams)
        # The milliseconds of the writer's next stream ID (IDs only grow, across restarts too).
        self.stream_ms = 0
        self.in_flight = None
        # States a pipeline in flight may have left its key in short of its last command's.
        self.in_flight_prefixes = {}
        self.sequence = 0
        self.acknowledged = 0
        self.failure = None

    def write_until_server_gone(self, port: int):
        """A thread's body: writes until the connection breaks; other errors become `failure`."""
        # No retries: a command resent after the kill would blur which write was in flight.
        client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=10, retry=Retry(NoBackoff(), 0))
        try:
            while True:
                self.write_once(client)
        except SERVER_GONE:
            pass  # killed under us: `in_flight` may or may not have been applied
        except Exception as error:  # noqa: BLE001 - any other error is a finding, reported whole
            self.failure = f"writer {self.number}: {type(error).__name__}: {error}"
        finally:
            client.close()

    def unique_value(self) -> str:
        self.sequence += 1
        return f"{self.number}.{self.sequence}." + "p" * self.rng.randrange(VALUE_PADDING_BYTES_MAX)

    def next_counter_value(self, counter: str) -> str:
        return str(int(self.expected[counter] or 0) + 1)

    def write_once(self, client):
        kind = self.rng.choices(["set", "incr", "mset", "multi", "del", "list", "list-pipeline", "set-type", "zset", "stream"], weights=[40, 20, 15, 15, 10, 20, 5, 10, 10, 10])[0]
        if kind == "list-pipeline":
            return self.write_list_pipeline(client) if self.rng.random() < 0.5 else self.write_sorted_set_pipeline(client)
        if kind == "stream":
            return self.write_stream(client)
        if kind == "list":
            return self.write_list(client)
        if kind == "set-type":
            return self.write_set(client)
        if kind == "zset":
            return self.write_sorted_set(client)
        if kind == "set":
            key = self.rng.choice(self.keys)
            changes = {key: self.unique_value()}
            self.send(changes, lambda: client.set(key, changes[key]), True)
        elif kind == "incr":
            counter = self.rng.choice(self.counters)
            changes = {counter: self.next_counter_value(counter)}
            self.send(changes, lambda: client.incr(counter), int(changes[counter]))
        elif kind == "mset":
            changes = {key: self.unique_value() for key in self.rng.sample(self.keys, self.rng.randint(2, 5))}
            self.send(changes, lambda: client.mset(changes), True)
        elif kind == "multi":
            first, second = self.rng.sample(self.keys, 2)
            counter = self.rng.choice(self.counters)
            changes = {first: self.unique_value(), counter: self.next_counter_value(counter), second: self.unique_value()}
            pipe = client.pipeline(transaction=True).set(first, changes[first]).incr(counter).set(second, changes[second])
            self.send(changes, pipe.execute, [True, int(changes[counter]), True])
        else:
            key = self.rng.choice(self.keys)
            changes = {key: None}
            self.send(changes, lambda: client.delete(key), int(self.expected[key] is not None))

    def write_list(self, client):
        """RPUSH (twice as often, so lists grow into chunks), LPOP of up to 3, or LMOVE between
        the writer's two lists."""
        key = self.rng.choice(self.lists)
        elements = self.expected[key] or ()
        kind = self.rng.choice(["rpush", "rpush", "lpop", "lmove"])
        if kind == "rpush":
            pushed = tuple(self.unique_value() for _ in range(self.rng.randint(1, 3)))
            changes = {key: elements + pushed}
            self.send(changes, lambda: client.rpush(key, *pushed), len(elements) + len(pushed))
        elif kind == "lpop":
            count = self.rng.randint(1, 3)
            changes = {key: elements[count:] or None}
            self.send(changes, lambda: client.lpop(key, count), list(elements[:count]) or None)
        else:
            target = next(other for other in self.lists if other != key)
            moved = elements[-1:]
            changes = {key: elements[:-1] or None, target: moved + (self.expected[target] or ())} if moved else {}
            self.send(changes, lambda: client.lmove(key, target, "RIGHT", "LEFT"), moved[0] if moved else None)

    def write_list_pipeline(self, client):
        """2 to 16 RPUSH and LPOP on one list in one pipeline (no MULTI): acknowledged together,
        each step's state a state the list may be found in after a kill."""
        key = self.rng.choice(self.lists)
        states, replies = [self.expected[key] or ()], []
        pipe = client.pipeline(transaction=False)
        for _ in range(self.rng.randint(2, 16)):
            elements = states[-1]
            if self.rng.random() < 0.7:
                pushed = tuple(self.unique_value() for _ in range(self.rng.randint(1, 2)))
                pipe.rpush(key, *pushed)
                states.append(elements + pushed)
                replies.append(len(states[-1]))
            else:
                pipe.lpop(key)
                states.append(elements[1:])
                replies.append(elements[0] if elements else None)
        states = [state or None for state in states]
        self.in_flight_prefixes = {key: states[1:-1]}
        self.send({key: states[-1]}, pipe.execute, replies)
        self.in_flight_prefixes = {}

    def write_set(self, client):
        key = self.rng.choice(self.sets)
        members = self.expected[key] or frozenset()
        if members and self.rng.random() < 0.3:
            removed = self.rng.choice(sorted(members))
            self.send({key: (members - {removed}) or None}, lambda: client.srem(key, removed), 1)
        else:
            added = self.unique_value()[:60]
            self.send({key: members | {added}}, lambda: client.sadd(key, added), 1)

    def write_sorted_set(self, client):
        """ZADD of a new member (twice as often, so sets grow into buckets), ZINCRBY of one, or
        ZPOPMIN."""
        key = self.rng.choice(self.sorted_sets)
        scores = dict(self.expected[key] or ())
        kind = self.rng.choice(["zadd", "zadd", "zincrby", "zpopmin"]) if scores else "zadd"
        if kind == "zadd":
            # Members of up to 300 bytes: a set passes 8 KiB, and so gets its order index, within
            # a few dozen members.
            member, score = self.unique_value(), float(self.rng.randrange(SCORES_DISTINCT))
            self.send({key: in_redis_order(scores | {member: score})}, lambda: client.zadd(key, {member: score}), 1)
        elif kind == "zincrby":
            member = self.rng.choice(sorted(scores))
            score = scores[member] + 1
            self.send({key: in_redis_order(scores | {member: score})}, lambda: client.zincrby(key, 1, member), score)
        else:
            lowest = in_redis_order(scores)[0]
            rest = in_redis_order({member: score for member, score in scores.items() if member != lowest[0]})
            self.send({key: rest or None}, lambda: client.zpopmin(key), [lowest])

    def write_sorted_set_pipeline(self, client):
        """2 to 16 ZADD (new members), ZINCRBY and ZPOPMIN on one sorted set in one pipeline (no
        MULTI): acknowledged together, each step's state a state the set may be found in after a
        kill."""
        key = self.rng.choice(self.sorted_sets)
        scores = dict(self.expected[key] or ())
        states, replies = [in_redis_order(scores) or None], []
        pipe = client.pipeline(transaction=False)
        for _ in range(self.rng.randint(2, 16)):
            draw = self.rng.random()
            if scores and draw < 0.3:
                member = self.rng.choice(sorted(scores))
                scores[member] += 1
                pipe.zincrby(key, 1, member)
                replies.append(scores[member])
            elif scores and draw < 0.45:
                lowest = in_redis_order(scores)[0]
                del scores[lowest[0]]
                pipe.zpopmin(key)
                replies.append([lowest])
            else:
                member = self.unique_value()
                scores[member] = float(self.rng.randrange(SCORES_DISTINCT))
                pipe.zadd(key, {member: scores[member]})
                replies.append(1)
            states.append(in_redis_order(scores) or None)
        self.in_flight_prefixes = {key: states[1:-1]}
        self.send({key: states[-1]}, pipe.execute, replies)
        self.in_flight_prefixes = {}

    def write_stream(self, client):
        """Creates the stream with its group, or XADD (sometimes trimming), XDEL, XREADGROUP of
        the next entry, XACK of a pending one."""
        key = self.rng.choice(self.streams)
        state = self.expected[key]
        if state is None:
            self.send({key: StreamState((), "0-0", frozenset())}, lambda: client.xgroup_create(key, "g", id="$", mkstream=True), True)
            return
        kind = self.rng.choice(["xadd", "xadd", "xadd-trim", "xdel", "xreadgroup", "xack"])
        if kind.startswith("xadd"):
            self.stream_ms += 1
            entry = (f"{self.stream_ms}-0", self.unique_value())
            entries = state.entries + (entry,)
            trim = {"maxlen": STREAM_ENTRIES_KEPT, "approximate": False} if kind == "xadd-trim" else {}
            entries = entries[-STREAM_ENTRIES_KEPT:] if trim else entries
            changes = {key: StreamState(entries, state.last_delivered, state.pending)}
            self.send(changes, lambda: client.xadd(key, {"v": entry[1]}, id=entry[0], **trim), entry[0])
        elif kind == "xdel" and state.entries:
            removed = self.rng.choice(state.entries)
            changes = {key: StreamState(tuple(entry for entry in state.entries if entry != removed), state.last_delivered, state.pending)}
            self.send(changes, lambda: client.xdel(key, removed[0]), 1)
        elif kind == "xreadgroup":
            after = stream_ms_of(state.last_delivered)
            entry = next((entry for entry in state.entries if stream_ms_of(entry[0]) > after), None)
            if entry is None:
                return
            changes = {key: StreamState(state.entries, entry[0], state.pending | {entry[0]})}
            self.send(changes, lambda: client.xreadgroup("g", "c", {key: ">"}, count=1), [[key, [(entry[0], {"v": entry[1]})]]])
        elif kind == "xack" and state.pending:
            acknowledged = self.rng.choice(sorted(state.pending))
            changes = {key: StreamState(state.entries, state.last_delivered, state.pending - {acknowledged})}
            self.send(changes, lambda: client.xack(key, "g", acknowledged), 1)

    def send(self, changes: dict, command, expected_reply):
        self.in_flight = changes
        reply = command()
        if reply != expected_reply:
            raise AssertionError(f"reply {reply!r}, expected {expected_reply!r} for {changes}")
        self.expected.update(changes)
        self.in_flight = None
        self.acknowledged += 1


@dataclass(frozen=True)
class StreamState:
    """A writer's stream: its entries (ID, value) in order, and its group's last delivered ID
    and pending IDs."""

    entries: tuple
    last_delivered: str
    pending: frozenset


def stream_ms_of(entry_id: str) -> int:
    return int(entry_id.split("-")[0])


def stream_state(client, key):
    if not client.exists(key):
        return None
    entries = tuple((entry_id, fields["v"]) for entry_id, fields in client.xrange(key))
    group = client.xinfo_groups(key)[0]
    pending = frozenset(item["message_id"] for item in client.xpending_range(key, "g", "-", "+", 1_000_000))
    return StreamState(entries, group["last-delivered-id"], pending)


def in_redis_order(scores: dict) -> tuple:
    """A sorted set's (member, score) pairs by score, then member."""
    return tuple(sorted(scores.items(), key=lambda pair: (pair[1], pair[0].encode())))


@dataclass
class Tally:
    cycles: int = 0
    kills_under_load: int = 0
    kills_in_recovery: int = 0
    acknowledged_writes: int = 0
    keys_checked: int = 0
    in_flight_applied: int = 0
    restart_seconds_max: float = 0.0
    problems: list = field(default_factory=list)


def check_after_restart(client, writer: Writer, tally: Tally, cycle: int):
    """Compares every key of the writer with the model, then adopts what the server has for the
    keys of the write that was in flight (applied or not, it is now durable)."""
    actual = {}
    strings = writer.keys + writer.counters
    for start in range(0, len(strings), MGET_KEYS_PER_CALL):
        keys = strings[start : start + MGET_KEYS_PER_CALL]
        actual.update(zip(keys, client.mget(keys)))
    for key in writer.lists:
        actual[key] = tuple(client.lrange(key, 0, -1)) or None
    for key in writer.sets:
        actual[key] = frozenset(client.smembers(key)) or None
    for key in writer.sorted_sets:
        actual[key] = tuple(client.zrange(key, 0, -1, withscores=True)) or None
    for key in writer.streams:
        actual[key] = stream_state(client, key)
    in_flight = writer.in_flight or {}
    for key, value in actual.items():
        allowed = [writer.expected[key]] + ([in_flight[key]] if key in in_flight else []) + writer.in_flight_prefixes.get(key, [])
        if value not in allowed:
            kind = "LOST" if writer.expected[key] is not None else "RESURRECTED"
            tally.problems.append(f"cycle {cycle}: {kind} {key}: acknowledged {writer.expected[key]!r:.40}, in flight {in_flight.get(key)!r:.40}, found {value!r:.40}")
    changed = [key for key in in_flight if in_flight[key] != writer.expected[key]]
    applied = [key for key in changed if actual[key] == in_flight[key] or actual[key] in writer.in_flight_prefixes.get(key, [])]
    if applied and len(applied) != len(changed):
        tally.problems.append(f"cycle {cycle}: HALF-APPLIED writer {writer.number}: {applied} of {changed}")
    tally.in_flight_applied += bool(applied)
    tally.keys_checked += len(actual)
    writer.expected.update(actual)
    writer.in_flight = None
    writer.in_flight_prefixes = {}


def restart(server: Server, rng: random.Random, tally: Tally):
    """Starts the server again, first killing it mid-recovery in some cycles."""
    if rng.random() < RECOVERY_KILL_PROBABILITY:
        server.launch()
        time.sleep(rng.uniform(0, RECOVERY_KILL_DELAY_SECONDS_MAX))
        server.kill9()
        tally.kills_in_recovery += 1
    began = time.monotonic()
    server.start()
    tally.restart_seconds_max = max(tally.restart_seconds_max, time.monotonic() - began)


def run_cycle(server: Server, writers: list, rng: random.Random, load_seconds_max: float, tally: Tally, cycle: int):
    threads = [threading.Thread(target=writer.write_until_server_gone, args=(server.port,), daemon=True) for writer in writers]
    for thread in threads:
        thread.start()
    time.sleep(rng.uniform(0.05, load_seconds_max))
    server.kill9()
    tally.kills_under_load += 1
    for thread in threads:
        thread.join(timeout=30)
    for writer in writers:
        if writer.failure:
            tally.problems.append(f"cycle {cycle}: {writer.failure}")
        tally.acknowledged_writes += writer.acknowledged
        writer.acknowledged = 0
    restart(server, rng, tally)
    client = server.client()
    for writer in writers:
        check_after_restart(client, writer, tally, cycle)
    client.close()
    tally.cycles += 1


def run_placement(index: str, data: str, cycles: int, seconds: float, seed: int, writers_count: int, load_seconds_max: float, workdir: Path, durability: str = "always") -> Tally:
    """Runs up to `cycles` kill/restart cycles on one placement within `seconds`."""
    rng = random.Random(f"{seed}/{index}/{data}")
    tally = Tally()
    server = Server(workdir / f"{index}-{data}", ["--index", index, "--data", data, "--durability", durability, *SERVER_SIZES])
    writers = [Writer(number, rng.randrange(2**32)) for number in range(writers_count)]
    deadline = time.monotonic() + seconds
    try:
        server.start()
        while tally.cycles < cycles and time.monotonic() < deadline and not tally.problems:
            run_cycle(server, writers, rng, load_seconds_max, tally, tally.cycles)
        server.stop()
    finally:
        server.cleanup()
    if tally.problems:
        tally.problems.append(f"server log: {server.log_path}")
    return tally


TABLE_HEADER = f"{'placement':<14} {'cycles':>6} {'kills':>5} {'in recovery':>11} {'acknowledged':>12} {'keys checked':>12} {'in flight applied':>17} {'restart s max':>13} {'problems':>8}"


def table_row(index: str, data: str, tally: Tally) -> str:
    return (
        f"{index + '/' + data:<14} {tally.cycles:>6} {tally.kills_under_load:>5} {tally.kills_in_recovery:>11} {tally.acknowledged_writes:>12} "
        f"{tally.keys_checked:>12} {tally.in_flight_applied:>17} {tally.restart_seconds_max:>13.2f} {len(tally.problems):>8}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10, help="kill/restart cycles per placement")
    parser.add_argument("--seconds", type=float, default=300, help="time budget of the whole run, shared equally by the placements")
    parser.add_argument("--placements", default="all", help="all, or index/data pairs such as pmem/ssd,dram/dram")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--writers", type=int, default=WRITERS_DEFAULT, help="writer connections")
    parser.add_argument("--durability", default="always", help="always; periodic or none show that the check catches losses")
    parser.add_argument("--load-seconds-max", type=float, default=2.0, help="longest load before a kill (each delay is uniform in [0.05, this])")
    args = parser.parse_args()
    placements = parse_placements(args.placements)
    workdir = Path(tempfile.mkdtemp(prefix="hybridkv-crash-loop-"))
    print(f"crash loop: seed {args.seed}, {args.cycles} cycles per placement, {args.seconds:.0f} s budget, {args.writers} writers, durability {args.durability}, data in {workdir}")
    print(TABLE_HEADER, flush=True)
    problems = []
    for index, data in placements:
        tally = run_placement(index, data, args.cycles, args.seconds / len(placements), args.seed, args.writers, args.load_seconds_max, workdir, args.durability)
        print(table_row(index, data, tally), flush=True)
        problems += tally.problems
    for problem in problems[:50]:
        print(problem)
    if problems:
        print(f"FAIL: {len(problems)} problems; data kept in {workdir}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    print("PASS: every acknowledged write was found with its latest acknowledged value")
    return 0


if __name__ == "__main__":
    sys.exit(main())
