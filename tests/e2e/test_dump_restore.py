"""DUMP and RESTORE between hybridkv and a real redis-server, both ways: every encoding Redis
7.0 writes for strings, hashes, sets and lists (plain, integer, LZF-compressed strings; listpack
and hashtable hashes; intset and hashtable sets; quicklists) restores here, and what hybridkv dumps restores in Redis. Error replies are
compared with Redis in test_compare_redis.py ("dump and restore")."""

import struct
import time

import pytest
import redis

STRINGS = {
    "plain": b"hello",
    "integer": b"12345",
    "negative": b"-7",
    "wide integer": str(2**40).encode(),
    "compressible": b"abc" * 400,
    "long": bytes(range(256)) * 40,
    "binary": b"\x00\xff\r\n",
    "empty": b"",
}

HASHES = {
    "listpack": {b"f": b"v", b"n": b"12", b"neg": b"-300", b"wide": str(2**50).encode(), b"": b"empty field"},
    "long value": {b"f": b"x" * 100, b"g": b"y"},
    "many fields": {f"field:{number}".encode(): f"value:{number}".encode() for number in range(700)},
    "compressible values": {b"a": b"abc" * 200, b"b": b"1" * 50},
}

SETS = {
    "intset": {b"1", b"-2", b"300", b"70000", str(2**40).encode()},
    "hashtable set": {b"a", b"b", b"12", b""},
    "many members": {f"member:{number}".encode() for number in range(3000)},
    "many integers": {str(number * 7).encode() for number in range(2000)},
}

LISTS = {
    "short list": [b"a", b"1", b"-5", b"300", b"70000", b"5000000000", b""],
    "long list": [f"element number {number:010d}".encode() for number in range(2000)],
    "long elements": [b"x" * 10_000, b"y", b"z" * 70_000],
}


@pytest.fixture
def pair(shared_server, reference_redis):
    ours = shared_server.client(decode_responses=False)
    theirs = redis.Redis(port=reference_redis, decode_responses=False, protocol=2)
    ours.flushdb()
    theirs.flushdb()
    yield ours, theirs
    ours.close()
    theirs.close()


def value_of(client, key):
    readers = {b"string": client.get, b"hash": client.hgetall, b"set": client.smembers, b"list": lambda key: client.lrange(key, 0, -1)}
    return readers[client.type(key)](key)


@pytest.mark.parametrize("name", sorted(STRINGS) + sorted(HASHES) + sorted(SETS) + sorted(LISTS))
def test_a_value_dumped_by_redis_restores_here_and_back(pair, name):
    ours, theirs = pair
    key = name.encode()
    if name in STRINGS:
        theirs.set(key, STRINGS[name])
    elif name in HASHES:
        theirs.hset(key, mapping=HASHES[name])
    elif name in SETS:
        theirs.sadd(key, *SETS[name])
    else:
        theirs.rpush(key, *LISTS[name])
    expected = value_of(theirs, key)
    assert ours.restore(key, 0, theirs.dump(key)) == b"OK"
    assert value_of(ours, key) == expected and ours.ttl(key) == -1
    assert theirs.restore(key + b"-back", 0, ours.dump(key)) == b"OK"
    assert value_of(theirs, key + b"-back") == expected


def test_restore_takes_a_ttl_replace_and_absttl_as_redis(pair):
    ours, theirs = pair
    theirs.set("s", "value")
    payload = theirs.dump("s")
    assert ours.restore("s", 100_000, payload) == b"OK"
    assert 0 < ours.pttl("s") <= 100_000
    with pytest.raises(redis.ResponseError, match="^BUSYKEY Target key name already exists.$"):
        ours.restore("s", 0, payload)
    ours.set("s", "other")
    assert ours.restore("s", 0, payload, replace=True) == b"OK" and ours.get("s") == b"value" and ours.ttl("s") == -1
    at_ms = int(time.time() * 1000) + 200_000
    assert ours.restore("s", at_ms, payload, replace=True, absttl=True) == b"OK"
    assert abs(ours.pexpiretime("s") - at_ms) <= 1
    # A TTL already past restores nothing, and REPLACE still removes the old key (as Redis).
    assert ours.restore("s", 1, payload, replace=True, absttl=True) == b"OK" and ours.exists("s") == 0
    ours.hset("h", mapping={"f": "v"})
    hash_payload = ours.dump("h")
    assert ours.restore("h2", 50_000, hash_payload, idletime=10) == b"OK"
    assert ours.hgetall("h2") == {b"f": b"v"} and 0 < ours.pttl("h2") <= 50_000
    assert ours.restore("h3", 0, hash_payload, frequency=5) == b"OK"
    assert ours.dump("missing") is None


def test_damaged_payloads_are_refused_and_change_nothing(pair):
    ours, _ = pair
    ours.set("s", "v")
    payload = bytearray(ours.dump("s"))
    payload[1] ^= 0x01
    with pytest.raises(redis.ResponseError, match="^DUMP payload version or checksum are wrong$"):
        ours.restore("s", 0, bytes(payload), replace=True)
    assert ours.get("s") == b"v"


def crc64_jones(data: bytes) -> int:
    """Redis's CRC-64 (Jones polynomial, reflected), bit by bit."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x95AC9329AC4BC9B5 if crc & 1 else 0)
    return crc


def payload(body: bytes, version: int = 10) -> bytes:
    framed = body + version.to_bytes(2, "little")
    return framed + crc64_jones(framed).to_bytes(8, "little")


def test_handmade_payloads_are_judged_as_redis_judges_them(pair):
    ours, theirs = pair
    theirs.set("x", "hello")
    assert payload(b"\x00\x05hello") == theirs.dump("x"), "the checksum is Redis's"
    # A field given twice is refused here; Redis 7.0 (sanitize-dump-payload no, its default)
    # takes it and builds a hash that holds the field twice.
    with pytest.raises(redis.ResponseError, match="^Bad data format$"):
        ours.restore("k", 0, payload(b"\x04\x02\x01f\x01v\x01f\x01w"))
    # hybridkv has no streams; and a body never reads into the footer (Redis 7.0 restores
    # this one as "hel" and two bytes of the version).
    for foreign in (payload(b"\x0f\x00"), payload(b"\x00\x05hel")):
        with pytest.raises(redis.ResponseError, match="^Bad data format$"):
            ours.restore("k", 0, foreign)
    one = struct.pack("<d", 1.5)
    cases = {
        "empty hash": payload(b"\x04\x00"),
        "empty set": payload(b"\x02\x00"),
        "newer version": payload(b"\x00\x01x", version=99),
        "sorted set with text scores": payload(b"\x03\x02\x01m\x011\x01n\xfe"),
        "empty sorted set": payload(b"\x05\x00"),
        "sorted set with a member twice": payload(b"\x05\x02\x01m" + one + b"\x01m" + one),
        "sorted set with a NaN score": payload(b"\x05\x01\x01m" + struct.pack("<d", float("nan"))),
    }
    for name, data in cases.items():
        replies = []
        for client in (ours, theirs):
            try:
                replies.append(client.restore("k", 0, data, replace=True))
            except redis.ResponseError as error:
                replies.append(str(error))
        assert replies[0] == replies[1], (name, replies)
        assert ours.zrange("k", 0, -1, withscores=True) == theirs.zrange("k", 0, -1, withscores=True), name
    assert ours.restore("k", 0, payload(b"\x04\x02\x01f\x01v\x01g\x01w"), replace=True) == b"OK" and ours.hgetall("k") == {b"f": b"v", b"g": b"w"}


def test_a_payload_that_would_build_a_value_over_the_limit_is_refused(pair):
    ours, theirs = pair
    limit = int(ours.config_get("value-bytes-max")["value-bytes-max"])
    theirs.set("huge", b"a" * (limit + 1))
    payload = theirs.dump("huge")
    assert len(payload) < limit // 50, "Redis compressed it (LZF: up to 88-fold)"
    with pytest.raises(redis.ResponseError, match=rf"^the payload holds {limit + 1} bytes in a compressed string, over the limit of {limit}$"):
        ours.restore("huge", 0, payload)
    assert ours.exists("huge") == 0
