"""GEO commands over sets of random positions, small (one record) and big (bucketed, with an order
index), compared byte for byte with redis-server: the cells a search reads, the members it finds
and their order, distances, hashes and coordinates, near the poles and the antimeridian too.
Each command's replies and errors are compared in test_compare_redis.py ("geo")."""

import random

import pytest
import redis

UNITS = ["m", "km", "ft", "mi"]
METERS = {"m": 1, "km": 1000, "ft": 0.3048, "mi": 1609.34}
LATITUDE_MAX = 85.05112878


def random_position(rng):
    """Somewhere, often near one of a few places, the poles' limits or the antimeridian."""
    kind = rng.random()
    if kind < 0.5:
        longitude, latitude = rng.choice([(13.4, 38.1), (-73.9, 40.7), (151.2, -33.9), (179.9, 10.0), (0.0, 0.0)])
        return max(-180, min(180, longitude + rng.uniform(-2, 2))), max(-LATITUDE_MAX, min(LATITUDE_MAX, latitude + rng.uniform(-2, 2)))
    if kind < 0.6:
        return rng.uniform(-180, 180), rng.choice([-1, 1]) * rng.uniform(80, LATITUDE_MAX)
    if kind < 0.7:
        return rng.choice([-1, 1]) * rng.uniform(178, 180), rng.uniform(-60, 60)
    return rng.uniform(-180, 180), rng.uniform(-LATITUDE_MAX, LATITUDE_MAX)


def text(number):
    return repr(round(number, 6))


def add_positions(clients, rng, key, count):
    members = [(random_position(rng), f"m{number}") for number in range(count)]
    for start in range(0, count, 500):
        arguments = [part for (longitude, latitude), member in members[start:start + 500] for part in (text(longitude), text(latitude), member)]
        for client in clients:
            client.execute_command("GEOADD", key, *arguments)
    return [member for _, member in members]


def random_search(rng, key, members):
    """A GEOSEARCH, GEORADIUS or GEORADIUSBYMEMBER (or a STORE form) with random options."""
    unit = rng.choice(UNITS)
    reach_meters = rng.choice([1_000, 50_000, 300_000, 2_000_000, 8_000_000, 19_000_000]) * rng.uniform(0.2, 1.5)
    size = text(reach_meters / METERS[unit])
    centre_longitude, centre_latitude = random_position(rng)
    options = [word for word in ("WITHDIST", "WITHHASH", "WITHCOORD") if rng.random() < 0.3]
    options += rng.choice([[], ["ASC"], ["DESC"]])
    if rng.random() < 0.3:
        options += ["COUNT", str(rng.randrange(1, 20))] + (["ANY"] if rng.random() < 0.3 else [])
    form = rng.random()
    if form < 0.5:
        centre = ["FROMLONLAT", text(centre_longitude), text(centre_latitude)] if rng.random() < 0.6 else ["FROMMEMBER", rng.choice(members)]
        extent = ["BYRADIUS", size, unit] if rng.random() < 0.5 else ["BYBOX", size, text(reach_meters * rng.uniform(0.3, 2) / METERS[unit]), unit]
        if rng.random() < 0.2:
            return ["GEOSEARCHSTORE", "stored", key, *centre, *extent, *[word for word in options if not word.startswith("WITH")], *(["STOREDIST"] if rng.random() < 0.5 else [])]
        return ["GEOSEARCH", key, *centre, *extent, *options]
    if form < 0.8:
        return ["GEORADIUS", key, text(centre_longitude), text(centre_latitude), size, unit, *options]
    return ["GEORADIUSBYMEMBER_RO", key, rng.choice(members), size, unit, *options]


def answer(client, command):
    try:
        return client.execute_command(*command)
    except redis.ResponseError as error:
        return ("error", str(error))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("members", [100, 3000])
def test_random_searches_find_what_redis_finds(binary_pair, seed, members):
    for client in binary_pair:
        client.response_callbacks.clear()
    rng = random.Random(seed * 10_000 + members)
    names = add_positions(binary_pair, rng, "places", members)
    found = 0
    for step in range(250):
        command = random_search(rng, "places", names)
        ours, theirs = (answer(client, command) for client in binary_pair)
        assert ours == theirs, f"step {step}: {command}"
        if command[0] == "GEOSEARCHSTORE":
            ours, theirs = (client.execute_command("ZRANGE", "stored", "0", "-1", "WITHSCORES") for client in binary_pair)
            assert ours == theirs, f"step {step}: stored by {command}"
        found += isinstance(theirs, list) and len(theirs) > 0
    assert found > 50, "most searches found members"
    for _ in range(50):
        pair = [rng.choice(names), rng.choice(names)]
        unit = rng.choice(UNITS)
        for command in (["GEODIST", "places", *pair, unit], ["GEOPOS", "places", *pair], ["GEOHASH", "places", *pair]):
            assert answer(binary_pair[0], command) == answer(binary_pair[1], command), command
