"""Random command sequences run against hybridkv and a real redis-server: every reply, error
texts included, must be the same. The fixed cases of test_compare_redis.py check each command's
edge cases one by one; these check how commands combine: a key that changes type, a hash that
grows past the small-hash limit into buckets and shrinks back, sets that do the same and combine (SINTER,
SUNIONSTORE, SMOVE…), lists pushed, popped, trimmed and moved between keys, sorted sets scored,
ranged, popped and combined (with sets too), streams added to, trimmed and read by consumer groups,
sorted (SORT BY and GET other keys), counters written as strings,
renames onto keys of another type, transactions that mix them, and two connections, so that
one writes the keys the other watches.

Seeded: a failure names its seed and the command that diverged, and reruns the same way."""

import random

import pytest
import redis

KEYS = ["k1", "k2", "k3", "h1", "h2", "{x}"]
FIELDS = ["f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8"]
SCALARS = ["", "0", "1", "-7", "10", "3.5", "-0.25", "abc", "9223372036854775807", "-9223372036854775808", "1e3", " 5"]
# Values this long make a hash of a few fields pass the 8 KiB small-hash limit (bucketed), and
# DEL/HDEL of them bring it back.
LONG_VALUE_BYTES = 3000
SEEDS = range(40)
COMMANDS_PER_SEED = 400

# Replies whose order Redis does not specify: compared as sorted lists (HGETALL as sorted pairs).
# SORT BY a pattern leaves elements whose BY values tie (missing ones too) in the order the
# key gave them, which for a set is each server's own ("SORT BY" in `reply_name`).
UNORDERED = {"KEYS", "HKEYS", "HVALS", "HRANDFIELD", "SMEMBERS", "SINTER", "SUNION", "SDIFF", "SPOP", "SRANDMEMBER", "ZRANDMEMBER", "SORT BY"}


def reply_name(arguments: list[str]) -> str:
    """The name a reply is normalized by: the command's, or "SORT BY" for a SORT by a pattern."""
    return "SORT BY" if arguments[0] == "SORT" and "BY" in arguments[2:] else arguments[0]


def value(rng: random.Random) -> str:
    if rng.random() < 0.08:
        return rng.choice("abcdef") * LONG_VALUE_BYTES
    return rng.choice(SCALARS)


def number(rng: random.Random) -> str:
    return rng.choice(["0", "1", "2", "-1", "5", "100", "x", "9223372036854775807"])


# Expiry times far in the future, set as absolute times: EXPIRETIME answers them exactly. (A
# time in the past would leave an expired key that DBSIZE counts until each server's background
# expiry removes it, at moments of its own.)
ABSOLUTE_SECONDS = ["4000000000", "4000000100", "4100000000"]
ABSOLUTE_ANSWERS = {int(seconds) for seconds in ABSOLUTE_SECONDS} | {int(seconds) * 1000 + 123 for seconds in ABSOLUTE_SECONDS}
ABSOLUTE_ANSWERS |= {int(seconds) * 1000 for seconds in ABSOLUTE_SECONDS} | {int(seconds) // 1000 for seconds in ABSOLUTE_SECONDS}


def ttl_seconds(rng: random.Random) -> str:
    """Seconds far apart: a GT or LT between two expiries set a few milliseconds apart from the
    same number of seconds would depend on the milliseconds."""
    return str(rng.randrange(1000, 1_000_000, 7))


# Sorted-set members and scores: few members, so that sets meet; scores that tie (ties are
# ordered by member), infinities, and words that are no score.
MEMBERS = ["m1", "m2", "m3", "m4", "m5", "m10", "", "1"]


def score(rng: random.Random) -> str:
    return rng.choice(["0", "1", "1", "2.5", "-3", "+inf", "-inf", "1e3", "x", "0.1"])


def score_bound(rng: random.Random) -> str:
    return rng.choice(["-inf", "+inf", "0", "(1", "1", "2.5", "(2.5", "x", "1000"])


def lex_bound(rng: random.Random) -> str:
    return rng.choice(["-", "+", "[m1", "(m1", "[m3", "(m5", "[", "m2"])


# Scripts over KEYS[1], KEYS[2] and ARGV[1]: reads, writes, errors raised and caught.
SCRIPTS = [
    "return redis.call('get', KEYS[1])",
    "redis.call('set', KEYS[1], ARGV[1]) return redis.call('append', KEYS[2], ARGV[1])",
    "return {redis.call('incr', KEYS[1]), redis.call('type', KEYS[2])}",
    "return redis.pcall('lpush', KEYS[1], ARGV[1])",
    "redis.call('rpush', KEYS[1], ARGV[1]) return redis.call('lrange', KEYS[1], 0, -1)",
    "return redis.call('zadd', KEYS[2], 1, ARGV[1])",
]


def stream_id(rng: random.Random, adding: bool = False) -> str:
    """A stream entry ID (explicit: `*` would take each server's clock), sometimes one that is
    refused."""
    ids = ["1-1", "2-0", "2", "3-5", "5-*", "10-1", "0-0", "x"]
    return rng.choice(ids + (["2-*", "3-*"] if adding else ["-", "+"]))


def position(rng: random.Random) -> tuple[str, str]:
    """A longitude and latitude: mostly near two places, sometimes out of range."""
    return rng.choice([("13.361389", "38.115556"), ("15.087269", "37.502669"), ("13.5", "38"), ("-73.9", "40.7"), ("200", "0"), ("x", "1")])


def geo_search_options(rng: random.Random) -> list[str]:
    centre = rng.choice([["FROMMEMBER", rng.choice(MEMBERS)], ["FROMLONLAT", *position(rng)]])
    extent = rng.choice([["BYRADIUS", rng.choice(["50", "300", "-1"]), "km"], ["BYBOX", "400", "200", rng.choice(["km", "mi"])]])
    # No COUNT with a sort: members at one position tie, and Redis orders ties of a partial sort
    # its own way (README).
    return centre + extent + rng.choice([[], ["ASC"], ["DESC"], ["COUNT", "2", "ANY"]])


def command(rng: random.Random) -> list[str]:
    key, other, field = rng.choice(KEYS), rng.choice(KEYS), rng.choice(FIELDS)
    choices = [
        lambda: ["SET", key, value(rng)] + rng.choice([[], ["NX"], ["XX"], ["GET"], ["XX", "GET"], ["KEEPTTL"]]),
        lambda: ["GET", key],
        lambda: ["SETNX", key, value(rng)],
        lambda: ["SETEX", key, ttl_seconds(rng), value(rng)],
        lambda: ["GETEX", key] + rng.choice([[], ["PERSIST"], ["EX", ttl_seconds(rng)]]),
        lambda: ["UNLINK", key, other],
        lambda: ["DEL", key] + rng.sample(KEYS, rng.randint(0, 2)),
        lambda: ["EXISTS", key, other],
        lambda: ["TYPE", key],
        lambda: ["APPEND", key, value(rng)],
        lambda: ["STRLEN", key],
        lambda: ["GETRANGE", key, number(rng), number(rng)],
        lambda: ["SETRANGE", key, rng.choice(["0", "3", "10", "-1", "x"]), rng.choice(SCALARS)],
        lambda: [rng.choice(["INCR", "DECR"]), key],
        # Never a byte's first bit: the values stay ASCII, which the clients decode as text.
        lambda: ["SETBIT", key, rng.choice(["1", "7", "9", "30", "100", "x", "-1"]), rng.choice(["0", "1", "1", "2"])],
        lambda: ["GETBIT", key, rng.choice(["0", "7", "9", "30", "200", "x"])],
        # No NOT: it sets the first bit of every byte (the values must stay ASCII, as above).
        lambda: ["BITOP", rng.choice(["AND", "OR", "XOR", "or"]), key, other] + rng.sample(KEYS, rng.randint(0, 2)),
        lambda: ["BITCOUNT", key] + rng.choice([[], [number(rng), number(rng)], [number(rng), number(rng), rng.choice(["BIT", "BYTE"])]]),
        lambda: ["BITPOS", key, rng.choice(["0", "1", "1", "2"])] + rng.choice([[], [number(rng)], [number(rng), number(rng)], [number(rng), number(rng), rng.choice(["BIT", "BYTE"])]]),
        lambda: [rng.choice(["INCRBY", "DECRBY"]), key, number(rng)],
        lambda: ["INCRBYFLOAT", key, rng.choice(["0.5", "-2", "1e2", "abc", "3"])],
        lambda: ["MSET", key, value(rng), other, value(rng)],
        lambda: ["MSETNX", key, value(rng), other, value(rng)],
        lambda: ["MGET", key, other, "missing"],
        lambda: ["GETSET", key, value(rng)],
        lambda: ["GETDEL", key],
        lambda: [rng.choice(["RENAME", "RENAMENX"]), key, other],
        lambda: ["COPY", key, other] + rng.choice([[], ["REPLACE"], ["DB", "0"], ["DB", rng.choice(["1", "2"]), "REPLACE"]]),
        lambda: ["HSET", key, field, value(rng)] + ([rng.choice(FIELDS), value(rng)] if rng.random() < 0.3 else []),
        lambda: ["HSETNX", key, field, value(rng)],
        lambda: ["HGET", key, field],
        lambda: ["HMGET", key, field, rng.choice(FIELDS)],
        lambda: ["HDEL", key, field] + rng.sample(FIELDS, rng.randint(0, 3)),
        lambda: ["HLEN", key],
        lambda: ["HEXISTS", key, field],
        lambda: ["HSTRLEN", key, field],
        lambda: ["HINCRBY", key, field, number(rng)],
        lambda: ["HINCRBYFLOAT", key, field, rng.choice(["1.5", "-3", "x"])],
        lambda: ["HGETALL", key],
        lambda: [rng.choice(["HKEYS", "HVALS"]), key],
        lambda: ["PERSIST", key],
        lambda: ["EXPIRE", key, ttl_seconds(rng)] + rng.choice([[], ["NX"], ["XX"], ["GT"], ["LT"]]),
        lambda: [rng.choice(["TTL", "PTTL"]), key],
        lambda: ["EXPIREAT", key, rng.choice(ABSOLUTE_SECONDS + ["1"])] + rng.choice([[], ["NX"], ["XX"], ["GT"], ["LT"]]),
        lambda: ["PEXPIREAT", key, rng.choice(ABSOLUTE_SECONDS) + "123"],
        lambda: ["SET", key, value(rng)] + rng.choice([["EXAT", rng.choice(ABSOLUTE_SECONDS)], ["PXAT", rng.choice(ABSOLUTE_SECONDS) + "000"]]),
        lambda: [rng.choice(["EXPIRETIME", "PEXPIRETIME"]), key],
        lambda: ["KEYS", rng.choice(["*", "k*", "?1", "[hk]2", "{*"])],
        # Pseudo-commands (see `run`): a whole SCAN or HSCAN iteration, compared as a set.
        lambda: ["SCAN*"] + rng.choice([[], ["MATCH", "k*"], ["TYPE", "hash"], ["TYPE", "string"], ["TYPE", "set"], ["TYPE", "zset"], ["COUNT", "2"]]),
        lambda: ["HSCAN*", key] + rng.choice([[], ["MATCH", "f1*"], ["COUNT", "3"]]),
        lambda: ["DBSIZE"],
        # Rarely, or no sequence keeps enough keys to say much.
        lambda: ["FLUSHDB"] if rng.random() < 0.1 else ["DBSIZE"],
        lambda: ["SCAN", "0", "COUNT", "1000"] + rng.choice([[], ["MATCH", "h*"], ["TYPE", "string"]]),
        lambda: ["RANDOMKEY"],
        lambda: ["PSETEX", key, rng.choice([ttl_seconds(rng) + "000", "0", "-5", "x"]), value(rng)],
        lambda: ["PEXPIRE", key, rng.choice([ttl_seconds(rng) + "000", "0", "x"])] + rng.choice([[], ["NX"], ["GT"]]),
        lambda: ["SET", key, value(rng), "PX", rng.choice([ttl_seconds(rng) + "000", "0", "-1"])] + rng.choice([[], ["NX"], ["GET"]]),
        lambda: ["GETEX", key] + rng.choice([["PX", ttl_seconds(rng) + "000"], ["EXAT", rng.choice(ABSOLUTE_SECONDS)], ["PXAT", rng.choice(ABSOLUTE_SECONDS) + "000"], ["EX", "0"], ["PERSIST", "EX", "5"]]),
        lambda: ["HMSET", key, field, value(rng), rng.choice(FIELDS), value(rng)],
        lambda: ["HSCAN", key, "0", "COUNT", "1000"] + rng.choice([[], ["MATCH", "f[1-4]"]]),
        lambda: ["EXISTS"] + rng.sample(KEYS, rng.randint(1, 4)),
        # More fields than any hash here has: all of them, so the reply is not random.
        lambda: ["HRANDFIELD", key, rng.choice(["100", "0", "x"])],
        lambda: ["TOUCH" if rng.random() < 0.2 else "TYPE", key],
        lambda: ["SADD", key] + [value(rng) for _ in range(rng.randint(1, 3))],
        lambda: ["SREM", key] + [rng.choice(SCALARS) for _ in range(rng.randint(1, 3))],
        lambda: [rng.choice(["SISMEMBER", "SMISMEMBER"]), key, rng.choice(SCALARS)] + rng.choice([[], [rng.choice(SCALARS)]]),
        lambda: [rng.choice(["SMEMBERS", "SCARD"]), key],
        lambda: [rng.choice(["SINTER", "SUNION", "SDIFF"]), key, other] + rng.sample(KEYS, rng.randint(0, 1)),
        lambda: [rng.choice(["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]), key, other] + rng.sample(KEYS, rng.randint(1, 2)),
        lambda: ["SINTERCARD", "2", key, other] + rng.choice([[], ["LIMIT", rng.choice(["0", "1", "-1"])]]),
        lambda: ["SMOVE", key, other, rng.choice(SCALARS)],
        # More members than any set here has: all of them, so the reply is not random.
        lambda: [rng.choice(["SPOP", "SRANDMEMBER"]), key] + rng.choice([["100"], ["0"], ["x"]]),
        lambda: ["SSCAN*", key] + rng.choice([[], ["MATCH", "*1*"], ["COUNT", "3"]]),
        lambda: [rng.choice(["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]), key] + [value(rng) for _ in range(rng.randint(1, 3))],
        lambda: [rng.choice(["LPOP", "RPOP"]), key] + rng.choice([[], ["2"], ["0"], ["-1"]]),
        lambda: ["LRANGE", key, rng.choice(["0", "1", "-2", "x"]), rng.choice(["-1", "2", "0", "100"])],
        lambda: [rng.choice(["LLEN", "LINDEX"]), key] + ([number(rng)] if rng.random() < 0.5 else []),
        lambda: ["LSET", key, rng.choice(["0", "-1", "3", "x"]), value(rng)],
        lambda: ["LTRIM", key, rng.choice(["0", "1", "-3"]), rng.choice(["-1", "2", "-2"])],
        lambda: ["LREM", key, rng.choice(["0", "1", "-1", "2"]), rng.choice(SCALARS)],
        lambda: ["LINSERT", key, rng.choice(["BEFORE", "AFTER"]), rng.choice(SCALARS), value(rng)],
        lambda: ["LPOS", key, rng.choice(SCALARS)] + rng.choice([[], ["RANK", "-1"], ["COUNT", "0"], ["RANK", "2", "COUNT", "2"], ["MAXLEN", "2"]]),
        lambda: ["LMOVE", key, other, rng.choice(["LEFT", "RIGHT"]), rng.choice(["LEFT", "RIGHT"])],
        lambda: ["RPOPLPUSH", key, other],
        lambda: ["LMPOP", "2", key, other, rng.choice(["LEFT", "RIGHT"])] + rng.choice([[], ["COUNT", "2"]]),
        # Blocking pops: served at once, or nil after 10 ms (and at once inside MULTI).
        lambda: [rng.choice(["BLPOP", "BRPOP"]), key, other, "0.01"],
        lambda: ["BLMOVE", key, other, rng.choice(["LEFT", "RIGHT"]), rng.choice(["LEFT", "RIGHT"]), "0.01"],
        lambda: ["BLMPOP", "0.01", "2", key, other, rng.choice(["LEFT", "RIGHT"])] + rng.choice([[], ["COUNT", "2"]]),
        lambda: ["ZADD", key] + rng.choice([[], [], ["NX"], ["XX"], ["GT"], ["LT", "CH"], ["INCR"], ["XX", "CH"]]) + [word for _ in range(rng.randint(1, 3)) for word in (score(rng), rng.choice(MEMBERS))],
        lambda: ["ZINCRBY", key, score(rng), rng.choice(MEMBERS)],
        lambda: ["ZREM", key] + rng.sample(MEMBERS, rng.randint(1, 3)),
        lambda: [rng.choice(["ZSCORE", "ZRANK", "ZREVRANK"]), key, rng.choice(MEMBERS)],
        lambda: ["ZMSCORE", key] + rng.sample(MEMBERS, rng.randint(1, 3)),
        lambda: ["ZCARD", key],
        # More members than any sorted set here has: all of them, so the reply is not random.
        lambda: ["ZRANDMEMBER", key, "100"] + rng.choice([[], ["WITHSCORES"]]),
        lambda: ["ZRANGE", key, rng.choice(["0", "1", "-2", "x"]), rng.choice(["-1", "2", "0", "100"])] + rng.choice([[], ["WITHSCORES"], ["REV"], ["REV", "WITHSCORES"]]),
        lambda: ["ZRANGE", key, score_bound(rng), score_bound(rng), "BYSCORE"] + rng.choice([[], ["WITHSCORES"], ["REV"], ["LIMIT", "1", "2"], ["REV", "LIMIT", "0", "-1", "WITHSCORES"]]),
        lambda: [rng.choice(["ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZCOUNT", "ZREMRANGEBYSCORE"]), key, score_bound(rng), score_bound(rng)],
        lambda: [rng.choice(["ZRANGEBYLEX", "ZREVRANGEBYLEX", "ZLEXCOUNT", "ZREMRANGEBYLEX"]), key, lex_bound(rng), lex_bound(rng)],
        lambda: [rng.choice(["ZREVRANGE", "ZREMRANGEBYRANK"]), key, rng.choice(["0", "1", "-2", "x"]), rng.choice(["-1", "2", "0"])],
        lambda: [rng.choice(["ZPOPMIN", "ZPOPMAX"]), key] + rng.choice([[], ["2"], ["0"], ["-1"]]),
        lambda: ["ZMPOP", "2", key, other, rng.choice(["MIN", "MAX"])] + rng.choice([[], ["COUNT", "2"]]),
        lambda: [rng.choice(["BZPOPMIN", "BZPOPMAX"]), key, other, "0.01"],
        lambda: ["BZMPOP", "0.01", "2", key, other, rng.choice(["MIN", "MAX"])],
        lambda: [rng.choice(["ZUNION", "ZINTER", "ZDIFF"]), "2", key, other] + rng.choice([[], ["WITHSCORES"], ["AGGREGATE", "MAX", "WITHSCORES"], ["WEIGHTS", "2", "-1", "WITHSCORES"]]),
        lambda: [rng.choice(["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]), key, "2", other, rng.choice(KEYS)],
        lambda: ["ZINTERCARD", "2", key, other],
        lambda: ["ZRANGESTORE", key, other, "0", rng.choice(["-1", "1"])],
        lambda: ["ZSCAN*", key] + rng.choice([[], ["MATCH", "m1*"], ["COUNT", "3"]]),
        lambda: ["GEOADD", key] + rng.choice([[], [], ["NX"], ["XX", "CH"]]) + [word for _ in range(rng.randint(1, 2)) for word in (*position(rng), rng.choice(MEMBERS))],
        lambda: [rng.choice(["GEOPOS", "GEOHASH"]), key, rng.choice(MEMBERS), rng.choice(MEMBERS)],
        lambda: ["GEODIST", key, rng.choice(MEMBERS), rng.choice(MEMBERS)] + rng.choice([[], ["km"], ["MI"]]),
        lambda: ["GEOSEARCH", key] + geo_search_options(rng) + rng.choice([[], ["WITHDIST"], ["WITHCOORD", "WITHHASH"]]),
        lambda: ["GEOSEARCHSTORE", key, other] + geo_search_options(rng) + rng.choice([[], ["STOREDIST"]]),
        lambda: ["GEORADIUS", key, *position(rng), rng.choice(["100", "5000"]), "km"] + rng.choice([[], ["WITHDIST", "ASC"], ["STORE", other]]),
        lambda: ["XADD", key] + rng.choice([[], [], ["NOMKSTREAM"], ["MAXLEN", rng.choice(["2", "=", "0"]), "3"][: 3 if rng.random() < 0.5 else 4], ["MINID", stream_id(rng)]])
        + [stream_id(rng, adding=True), rng.choice(FIELDS), value(rng)] + ([rng.choice(FIELDS), value(rng)] if rng.random() < 0.3 else []),
        lambda: [rng.choice(["XRANGE", "XREVRANGE"]), key, rng.choice(["-", "+", "(2-0"]), rng.choice(["+", "-", "5"])] + rng.choice([[], ["COUNT", rng.choice(["1", "2", "0"])]]),
        lambda: ["XLEN", key],
        lambda: ["XDEL", key, stream_id(rng)] + ([stream_id(rng)] if rng.random() < 0.5 else []),
        lambda: ["XTRIM", key] + rng.choice([["MAXLEN", rng.choice(["1", "3", "x"])], ["MINID", stream_id(rng)], ["MAXLEN", "=", "2"]]),
        lambda: ["XREAD"] + rng.choice([[], ["COUNT", "2"], ["BLOCK", "10"]]) + ["STREAMS", key, other, stream_id(rng), rng.choice(["0", "$"])],
        lambda: ["XSETID", key, rng.choice(["10-0", "3-3", "0-1", "bad"])],
        lambda: ["XGROUP", "CREATE", key, rng.choice(["g1", "g2"]), rng.choice(["0", "$", "2-0"])] + rng.choice([[], ["MKSTREAM"]]),
        lambda: ["XGROUP", rng.choice(["DESTROY", "CREATECONSUMER", "DELCONSUMER"]), key, rng.choice(["g1", "g2"])] + rng.choice([[], ["c1"], ["c2"]]),
        lambda: ["XREADGROUP", "GROUP", rng.choice(["g1", "g2"]), rng.choice(["c1", "c2"])] + rng.choice([[], ["COUNT", "2"], ["NOACK"], ["BLOCK", "10"]]) + ["STREAMS", key, rng.choice([">", ">", "0"])],
        lambda: ["XACK", key, rng.choice(["g1", "g2"]), stream_id(rng), stream_id(rng)],
        lambda: ["XPENDING", key, rng.choice(["g1", "g2"])],
        lambda: ["XCLAIM", key, rng.choice(["g1", "g2"]), rng.choice(["c1", "c2"]), "0", stream_id(rng), stream_id(rng), "JUSTID"],
        lambda: ["XAUTOCLAIM", key, rng.choice(["g1", "g2"]), rng.choice(["c1", "c2"]), "0", "0"] + rng.choice([[], ["COUNT", "1"], ["JUSTID"]]),
        lambda: ["XINFO", "GROUPS", key],
        # A set has no order of its own: BY nosort only with STORE, which sorts a set ALPHA.
        lambda: ["SORT", key] + rng.choice([[], ["ALPHA"], ["DESC", "LIMIT", "1", "2"], ["BY", "k*"], ["BY", "h*->f1", "ALPHA"], ["GET", "#", "GET", "k*"], ["ALPHA", "STORE", other], ["BY", "nosort", "STORE", other]]),
        lambda: ["EVAL", rng.choice(SCRIPTS), "2", key, other, value(rng)],
        # Session commands: queued in MULTI too, where a bad subcommand discards the transaction.
        lambda: ["CLIENT", "SETNAME", rng.choice(["alpha", "beta"])],
        lambda: ["CLIENT", rng.choice(["GETNAME", "GETNAME", "NOSUCH"])] + rng.choice([[], [], ["extra"]]),
        lambda: ["CONFIG", "GET"] + rng.choice([["maxclients"], []]),
        # Another database: the same key names, other keys (refused inside MULTI, see below).
        lambda: ["SELECT", rng.choice(["0", "0", "1", "2"])],
        lambda: ["MOVE", key, rng.choice(["0", "1", "2"])],
        lambda: ["SWAPDB", rng.choice(["0", "1", "2"]), rng.choice(["0", "1", "2"])],
    ]
    return rng.choice(choices)()


def normalized(name: str, reply):
    if isinstance(reply, Exception):
        return ("error", str(reply))
    if name in ("TTL", "PTTL") and isinstance(reply, int) and reply > 0:
        # Time left ticks down between the two servers' replies: compare that there is some.
        return "positive"
    if name in ("EXPIRETIME", "PEXPIRETIME") and isinstance(reply, int) and reply > 0 and reply not in ABSOLUTE_ANSWERS:
        # An expiry set relative to the clock: the second or millisecond differs between servers.
        return "positive"
    if name == "HGETALL" and isinstance(reply, dict):
        return sorted(reply.items())
    if name == "HGETALL" and isinstance(reply, list):
        return sorted(zip(reply[::2], reply[1::2]))
    if name in UNORDERED and isinstance(reply, list):
        return sorted(reply)
    if name == "HSCAN" and isinstance(reply, list) and len(reply) == 2:
        # One call with a COUNT above the number of fields: all of them, in the server's order.
        return [str(reply[0]), sorted(zip(reply[1][::2], reply[1][1::2]))]
    if name == "SCAN" and isinstance(reply, list) and len(reply) == 2:
        # One call with a COUNT above the number of keys: all of them, in the server's order.
        return [str(reply[0]), sorted(reply[1])]
    if name == "RANDOMKEY":
        # Which key is random; whether there is one is not.
        return reply is not None
    if isinstance(reply, set):
        # A RESP3 set (SMEMBERS, SINTER…).
        return sorted(reply)
    if isinstance(reply, list):
        return [normalized("", item) for item in reply]
    return reply


def raw_client(port: int, protocol: int) -> redis.Redis:
    """A client that hands back replies as the server sent them (redis-py's per-command
    conversions would misread the QUEUED replies inside MULTI)."""
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True, protocol=protocol)
    client.response_callbacks.clear()
    return client


def whole_scan(client: redis.Redis, arguments: list[str]):
    """Every item a SCAN (`SCAN*` options), HSCAN or SSCAN (`HSCAN*` / `SSCAN*` key options)
    iteration returns, sorted: cursors and page sizes are the server's own business."""
    command, prefix, options = ("SCAN", [], arguments[1:]) if arguments[0] == "SCAN*" else (arguments[0][:-1], arguments[1:2], arguments[2:])
    cursor, items = "0", []
    while True:
        cursor, page = client.execute_command(command, *prefix, cursor, *options)
        items.extend(page)
        if str(cursor) == "0":
            break
    if command in ("HSCAN", "ZSCAN"):
        return sorted(set(zip(items[::2], items[1::2])))
    return sorted(set(items))


# Commands a pipelined run never holds: pseudo-commands of several calls, transactions' edges,
# blocking commands (sent alone, as a client waiting for them would).
NOT_PIPELINED = {"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"}
PIPELINED_RUN_MAX = 32


def pipelinable(arguments: list[str]) -> bool:
    return not arguments[0].endswith("*") and arguments[0] not in NOT_PIPELINED and not arguments[0].startswith("B") and "BLOCK" not in arguments


def sent(clients: list[redis.Redis], commands: list[tuple[int, list[str]]], pipelined: bool):
    """Each command's raw reply (an error as the exception), in order: one at a time, or, when
    `pipelined`, runs of consecutive commands of one connection in one pipeline without MULTI
    (so that the server groups its writes, "Pipelined single-key writes share a transaction")."""
    at = 0
    while at < len(commands):
        connection, arguments = commands[at]
        run_end = at + 1
        if pipelined and pipelinable(arguments):
            while run_end < len(commands) and run_end - at < PIPELINED_RUN_MAX and commands[run_end][0] == connection and pipelinable(commands[run_end][1]):
                run_end += 1
        if run_end - at > 1:
            pipe = clients[connection].pipeline(transaction=False)
            for _, words in commands[at:run_end]:
                pipe.execute_command(*words)
            yield from pipe.execute(raise_on_error=False)
        else:
            try:
                yield whole_scan(clients[connection], arguments) if arguments[0].endswith("*") else clients[connection].execute_command(*arguments)
            except redis.ResponseError as error:
                yield error
        at = run_end


def run(clients: list[redis.Redis], commands: list[tuple[int, list[str]]], pipelined: bool = False) -> list:
    """Each command on its connection (an index into `clients`); the replies in order."""
    replies = []
    queued = {connection: [] for connection in range(len(clients))}
    for (connection, arguments), reply in zip(commands, sent(clients, commands, pipelined)):
        name = reply_name(arguments)
        if name == "EXEC" and isinstance(reply, list):
            # Each of EXEC's replies is normalized as its own command's.
            replies.append([normalized(reply_name(command), item) for command, item in zip(queued[connection], reply)])
        else:
            replies.append(normalized(name, reply))
        queued[connection] = [] if name in ("MULTI", "EXEC", "DISCARD") else queued[connection] + [arguments]
    return replies


# Pseudo-commands of several calls, SELECT (a transaction whose key commands run in two databases
# is refused: EXEC commits one batch of one database), MOVE and SWAPDB (refused there): not inside
# MULTI. test_compare_redis.py compares SELECT inside MULTI.
NOT_IN_MULTI = {"SCAN*", "HSCAN*", "SSCAN*", "ZSCAN*", "SELECT", "MOVE", "SWAPDB"}


CONNECTIONS = 2


def transaction_of(rng: random.Random) -> list[tuple[int, list[str]]]:
    """MULTI, a few commands, then EXEC or DISCARD, on one connection (EXEC's reply holds every
    queued reply). Often WATCH first, with commands of either connection between it and MULTI
    that may change a watched key (a change by the watching client itself aborts EXEC too; a
    command that changes nothing does not)."""
    connection = rng.randrange(CONNECTIONS)
    watching = []
    if rng.random() < 0.5:
        watching = [(connection, ["WATCH"] + rng.sample(KEYS, rng.randint(1, 2)))]
        watching += [(rng.randrange(CONNECTIONS), command(rng)) for _ in range(rng.randint(0, 2))]
        watching += [(connection, ["UNWATCH"])] if rng.random() < 0.1 else []
    queued = []
    while len(queued) < rng.randint(1, 4):
        candidate = command(rng)
        if candidate[0] not in NOT_IN_MULTI:
            queued.append((connection, candidate))
    ending = [(connection, [rng.choice(["EXEC", "EXEC", "DISCARD"])])]
    return watching + [(connection, ["MULTI"])] + queued + ending


def with_copies_within_the_database_inside_multi(commands: list[tuple[int, list[str]]]) -> list[tuple[int, list[str]]]:
    """Inside MULTI, COPY's DB option names the database its connection has selected: hybridkv
    refuses a copy to another database there (README, "Differences from Redis")."""
    selected, in_multi = {}, set()
    for connection, arguments in commands:
        if arguments[0] == "SELECT":
            selected[connection] = arguments[1]
        elif arguments[0] in ("MULTI", "EXEC", "DISCARD"):
            (in_multi.add if arguments[0] == "MULTI" else in_multi.discard)(connection)
        elif arguments[0] == "COPY" and "DB" in arguments and connection in in_multi:
            arguments[arguments.index("DB") + 1] = selected.get(connection, "0")
    return commands


def sequence(seed: int) -> list[tuple[int, list[str]]]:
    rng = random.Random(seed)
    commands = []
    while len(commands) < COMMANDS_PER_SEED:
        commands.extend(transaction_of(rng) if rng.random() < 0.05 else [(rng.randrange(CONNECTIONS), command(rng))])
    return with_copies_within_the_database_inside_multi(commands)


def shown(arguments: list[str]) -> str:
    return " ".join(argument if len(argument) < 40 else f"<{len(argument)} bytes>" for argument in arguments)


def first_divergence(commands, expected, actual):
    """The first command whose replies differ, with the commands of its transaction."""
    transaction_start = {}
    for at, ((connection, arguments), want, got) in enumerate(zip(commands, expected, actual)):
        if arguments[0] == "MULTI":
            transaction_start[connection] = at
        if want != got:
            start = transaction_start.get(connection)
            context = commands[start:at] if arguments[0] == "EXEC" and start is not None else []
            queued = "".join(f"[{other}] {shown(command)}; " for other, command in context)
            return f"{queued}[{connection}] {shown(arguments)}: redis {str(want)[:200]!r} hybridkv {str(got)[:200]!r}"
    return None


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequences_match_redis(shared_server, reference_redis, seed):
    protocol = 3 if seed % 2 else 2
    ours = [raw_client(shared_server.port, protocol) for _ in range(CONNECTIONS)]
    theirs = [raw_client(reference_redis, protocol) for _ in range(CONNECTIONS)]
    ours[0].flushall()
    theirs[0].flushall()
    commands = sequence(seed)
    # A third of the seeds pipeline their commands, so that writes run in groups.
    pipelined = seed % 3 == 2
    expected = run(theirs, commands, pipelined)
    actual = run(ours, commands, pipelined)
    divergence = first_divergence(commands, expected, actual)
    assert divergence is None, f"seed {seed}: {divergence}"
    # The end states agree too, key by key.
    final = [["KEYS", "*"]] + [[name, key] for key in KEYS for name in ("TYPE", "GET", "HGETALL", "SMEMBERS", "LRANGE", "ZRANGE")]
    types = {key: theirs[0].execute_command("TYPE", key) for key in KEYS}
    reader_type = {"GET": "string", "HGETALL": "hash", "SMEMBERS": "set", "LRANGE": "list", "ZRANGE": "zset"}
    final = [(0, arguments + (["0", "-1"] if arguments[0] in ("LRANGE", "ZRANGE") else [])) for arguments in final if arguments[0] not in reader_type or types[arguments[1]] == reader_type[arguments[0]]]
    assert run(ours, final) == run(theirs, final), f"seed {seed}: final states differ"
