"""The crash loop (scripts/crash_loop.py), shortened: two SIGKILL/restart cycles per placement
under a write load with durability `always`; every acknowledged write must be there. The long run
is documented in docs/RELIABILITY.md."""

import sys
from pathlib import Path

import pytest

from conftest import PLACEMENT_IDS, PLACEMENTS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import crash_loop  # noqa: E402

SEED = 7
CYCLES = 2
WRITERS = 4
LOAD_SECONDS_MAX = 0.5
PLACEMENT_SECONDS_MAX = 60


@pytest.mark.parametrize("index, data", PLACEMENTS, ids=PLACEMENT_IDS)
def test_acknowledged_writes_survive_a_crash_loop(tmp_path, index, data):
    tally = crash_loop.run_placement(index, data, CYCLES, PLACEMENT_SECONDS_MAX, SEED, WRITERS, LOAD_SECONDS_MAX, tmp_path)
    assert tally.problems == []
    assert tally.cycles == CYCLES
    assert tally.acknowledged_writes > 0, "the load did not get going"
    assert tally.keys_checked == CYCLES * WRITERS * (crash_loop.KEYS_PER_WRITER + crash_loop.COUNTERS_PER_WRITER + crash_loop.LISTS_PER_WRITER + crash_loop.SETS_PER_WRITER + crash_loop.SORTED_SETS_PER_WRITER + crash_loop.STREAMS_PER_WRITER)


class FakeClient:
    """What the restarted server holds, for checking the checker."""

    def __init__(self, values: dict):
        self.values = values

    def mget(self, keys):
        return [self.values.get(key) for key in keys]

    def lrange(self, key, start, stop):
        assert (start, stop) == (0, -1)
        return list(self.values.get(key) or ())

    def smembers(self, key):
        return set(self.values.get(key) or ())

    def zrange(self, key, start, stop, withscores):
        assert (start, stop, withscores) == (0, -1, True)
        return list(self.values.get(key) or ())

    def exists(self, key):
        return int(self.values.get(key) is not None)

    def xrange(self, key):
        return [(entry_id, {"v": value}) for entry_id, value in self.values[key].entries]

    def xinfo_groups(self, key):
        return [{"name": "g", "last-delivered-id": self.values[key].last_delivered}]

    def xpending_range(self, key, group, minimum, maximum, count):
        return [{"message_id": entry_id} for entry_id in sorted(self.values[key].pending)][:count]


def writer_with(expected: dict, in_flight=None) -> crash_loop.Writer:
    writer = crash_loop.Writer(0, seed=0)
    writer.expected = dict.fromkeys(writer.expected) | expected
    writer.in_flight = in_flight
    return writer


def check(writer, found: dict) -> crash_loop.Tally:
    tally = crash_loop.Tally()
    crash_loop.check_after_restart(FakeClient(writer.expected | found), writer, tally, cycle=0)
    return tally


def test_checker_flags_lost_and_resurrected_keys():
    writer = writer_with({"w0:k1": "new", "w0:counter0": "5"})
    problems = check(writer, {"w0:k1": "old", "w0:counter0": "4", "w0:k2": "deleted"}).problems
    assert sorted(problem.split(":")[1].split()[0] for problem in problems) == ["LOST", "LOST", "RESURRECTED"]


def test_checker_accepts_a_write_in_flight_applied_whole_or_not_at_all():
    in_flight = {"w0:k1": "a2", "w0:k2": "b2"}
    for found in ({}, in_flight):
        writer = writer_with({"w0:k1": "a1", "w0:k2": "b1"}, dict(in_flight))
        tally = check(writer, found)
        assert tally.problems == []
        assert tally.in_flight_applied == (found == in_flight)
        assert writer.in_flight is None and writer.expected["w0:k1"] == found.get("w0:k1", "a1")


def test_checker_flags_a_half_applied_transaction():
    writer = writer_with({"w0:k1": "a1", "w0:k2": "b1"}, {"w0:k1": "a2", "w0:k2": "b2"})
    assert [problem.split(":")[1].split()[0] for problem in check(writer, {"w0:k1": "a2"}).problems] == ["HALF-APPLIED"]


def test_checker_flags_a_lost_member_or_score_of_a_sorted_set():
    writer = writer_with({"w0:zset0": (("a", 1.0), ("b", 2.0)), "w0:zset1": (("c", 5.0),)})
    problems = check(writer, {"w0:zset0": (("a", 1.0),), "w0:zset1": (("c", 4.0),)}).problems
    assert [problem.split(":")[1].split()[0] for problem in problems] == ["LOST", "LOST"]
    assert crash_loop.in_redis_order({"b": 1.0, "a": 1.0, "c": 0.5}) == (("c", 0.5), ("a", 1.0), ("b", 1.0))


def test_checker_flags_a_lost_list_element_a_lost_member_and_a_half_applied_move():
    writer = writer_with({"w0:list0": ("a", "b"), "w0:set0": frozenset({"m"})})
    problems = check(writer, {"w0:list0": ("a",), "w0:set0": None}).problems
    assert [problem.split(":")[1].split()[0] for problem in problems] == ["LOST", "LOST"]
    moved = {"w0:list0": ("a",), "w0:list1": ("b",)}
    writer = writer_with({"w0:list0": ("a", "b")}, dict(moved))
    assert [problem.split(":")[1].split()[0] for problem in check(writer, {"w0:list1": ("b",)}).problems] == ["HALF-APPLIED"]
    writer = writer_with({"w0:list0": ("a", "b")}, dict(moved))
    assert check(writer, moved).problems == [] and writer.expected["w0:list1"] == ("b",)


def test_checker_flags_a_lost_stream_entry_and_a_lost_pending_entry():
    state = crash_loop.StreamState((("1-0", "a"), ("2-0", "b")), "1-0", frozenset({"1-0"}))
    writer = writer_with({"w0:stream0": state, "w0:stream1": state})
    found = {"w0:stream0": crash_loop.StreamState((("1-0", "a"),), "1-0", frozenset({"1-0"})), "w0:stream1": crash_loop.StreamState(state.entries, "1-0", frozenset())}
    assert [problem.split(":")[1].split()[0] for problem in check(writer, found).problems] == ["LOST", "LOST"]
    assert check(writer_with({"w0:stream0": state}), {}).problems == []
