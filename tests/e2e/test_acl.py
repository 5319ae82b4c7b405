"""ACL users: compared with redis-server where this server grants what Redis grants (all
commands, keys or channels of a kind, or none), and this server's clear refusal of finer rules.

The reference redis-server is shared by the session: these tests create users named acl_* and
delete them, and never change its default user (tests that do run on servers of their own).
"""

import re

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import raw_exchange, wait_until

USERS = ["acl_alice", "acl_eve", "acl_frank", "acl_gina", "acl_off", "acl_reset"]
# A failed authentication fails at once (redis-py retries connection errors with backoff).
NO_RETRY = Retry(NoBackoff(), 0)
HASH_OF_PASSWORD = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"


def reply(client, *words):
    """The reply, or an error's text."""
    try:
        return client.execute_command(*words)
    except (redis.ResponseError, redis.AuthenticationError) as error:
        return f"error: {error}"


@pytest.fixture
def users_pair(pair):
    def clean():
        for client in pair:
            client.execute_command("ACL", "DELUSER", *USERS)
            client.execute_command("ACL", "LOG", "RESET")
    clean()
    yield pair
    clean()


def ours_and_theirs(pair, *words):
    return tuple(reply(client, *words) for client in pair)


def test_acl_setuser_list_getuser_and_errors_answer_as_redis(users_pair):
    steps = [
        ["ACL", "SETUSER", "acl_alice"],
        ["ACL", "GETUSER", "acl_alice"],
        ["ACL", "SETUSER", "acl_alice", "on", ">pw", "allkeys"],
        ["ACL", "SETUSER", "acl_eve", "ON", "#" + HASH_OF_PASSWORD, ">p2", "+@ALL", "~*", "&*"],
        ["ACL", "GETUSER", "acl_eve"],
        ["ACL", "SETUSER", "acl_eve", "<p2", "!" + HASH_OF_PASSWORD, "resetchannels", "nocommands"],
        ["ACL", "GETUSER", "acl_eve"],
        ["ACL", "SETUSER", "acl_frank", "on", "nopass", ">x"],
        ["ACL", "SETUSER", "acl_gina", ">x", "nopass", "skip-sanitize-payload"],
        ["ACL", "SETUSER", "acl_reset", "on", ">x", "allcommands", "reset"],
        ["ACL", "GETUSER", "acl_gina"],
        ["ACL", "GETUSER", "acl_nobody"],
        ["ACL", "SETUSER", "acl_alice", "bogus"],
        ["ACL", "SETUSER", "acl_alice", "#abc"],
        ["ACL", "SETUSER", "acl_alice", "#" + HASH_OF_PASSWORD.upper()],
        ["ACL", "SETUSER", "acl_alice", "<never-set"],
        ["ACL", "SETUSER", "acl_alice", "~*", "~more"],
        ["ACL", "SETUSER", "acl_alice", "resetkeys", "bogus"],
        ["ACL", "GETUSER", "acl_alice"],
        ["ACL", "SETUSER", "acl alice", "on"],
        ["ACL", "SETUSER"],
        ["ACL", "DELUSER", "default"],
        ["ACL", "DELUSER", "acl_reset", "acl_nobody"],
        ["ACL", "WHOAMI"],
        ["ACL", "WHOAMI", "extra"],
        ["ACL", "CAT"],
        ["ACL", "CAT", "nocategory"],
        ["ACL", "GENPASS", "0"],
        ["ACL", "GENPASS", "4097"],
        ["ACL", "GENPASS", "x"],
        ["ACL", "LOG", "x"],
        ["ACL", "SAVE"],
        ["ACL", "LOAD"],
        ["ACL", "BOGUS"],
        ["ACL", "DRYRUN", "acl_nobody", "get", "x"],
        ["ACL", "DRYRUN", "acl_alice", "nosuchcommand"],
        ["ACL", "DRYRUN", "acl_alice", "get"],
        ["ACL", "DRYRUN", "acl_alice", "get", "x"],
        ["ACL", "DRYRUN", "acl_alice", "config", "get", "maxmemory"],
        ["ACL", "SETUSER", "acl_alice", "allcommands"],
        ["ACL", "DRYRUN", "acl_alice", "get", "x"],
        ["ACL", "DRYRUN", "acl_alice", "publish", "news", "hello"],
        ["ACL", "DRYRUN", "acl_frank", "set", "x", "1"],
        ["ACL", "DRYRUN", "default", "publish", "news", "hello"],
    ]
    for words in steps:
        ours, theirs = ours_and_theirs(users_pair, *words)
        assert ours == theirs, words
    ours, theirs = (sorted(line for line in reply(client, "ACL", "LIST") if " acl_" in line or " default " in line) for client in users_pair)
    assert ours == theirs
    for client in users_pair:
        assert {"acl_alice", "acl_eve", "acl_frank", "acl_gina", "default"} <= set(reply(client, "ACL", "USERS"))
        assert [len(reply(client, "ACL", "GENPASS", *bits)) for bits in ([], ["1"], ["5"], ["4096"])] == [64, 1, 2, 1024]


def test_finer_rules_are_refused_with_a_clear_error_and_change_nothing(r):
    try:
        r.execute_command("ACL", "SETUSER", "acl_alice", "on", ">pw")
        for rule in ["+get", "-@dangerous", "~app:*", "%R~*", "&news", "(~x +get)"]:
            text = reply(r, "ACL", "SETUSER", "acl_alice", "allcommands", rule)
            assert text.startswith(f"error: Error in ACL SETUSER modifier '{rule}':") and "finer rules are not supported" in text
        assert r.execute_command("ACL", "GETUSER", "acl_alice")["commands"] == "-@all", "no rule of a refused SETUSER applies"
        assert reply(r, "ACL", "CAT", "read").startswith("error: this server grants a user all commands or none")
    finally:
        r.execute_command("ACL", "DELUSER", "acl_alice")


def authenticated(server_port, user, password):
    """A client of one connection that authenticates as `user` (in its HELLO)."""
    return redis.Redis(port=server_port, decode_responses=True, single_connection_client=True, username=user, password=password, retry=NO_RETRY)


def comparable(answer):
    """A reply as text, without the script's SHA-1 in script errors, KEYS's order aside."""
    if isinstance(answer, list):
        answer = sorted(answer)
    return re.sub(r" script: \w+, on @user_script:\d+\.", "", str(answer))


def port_of(client):
    return client.connection_pool.connection_kwargs["port"]


def test_permissions_refuse_commands_keys_and_channels_as_redis(users_pair):
    grants = {
        "acl_eve": ["allkeys"],  # no commands
        "acl_frank": ["allcommands"],  # no keys, no channels
        "acl_gina": ["allcommands", "allkeys"],  # no channels
        "acl_alice": ["allcommands", "allkeys", "allchannels"],
    }
    for client in users_pair:
        for user, rules in grants.items():
            client.execute_command("ACL", "SETUSER", user, "on", ">pw", *rules)
    requests = [
        ["GET", "k"],
        ["SET", "k", "v"],
        ["MSET", "a", "1", "b", "2"],
        ["PING"],
        ["KEYS", "*"],
        ["DBSIZE"],
        ["CONFIG", "GET", "maxclients"],
        ["PUBLISH", "news", "hello"],
        ["EVAL", "return redis.call('get', KEYS[1])", "1", "k"],
        ["ACL", "WHOAMI"],
    ]
    for user in grants:
        replies = []
        for client in users_pair:
            connection = authenticated(port_of(client), user, "pw")
            replies.append([comparable(reply(connection, *words)) for words in requests])
            transaction = [["MULTI"], ["SET", "k", "v"], ["GET", "k"], ["EXEC"], ["ACL", "WHOAMI"]]
            replies[-1].extend(str(reply(connection, *words)) for words in transaction)
            connection.close()
        assert replies[0] == replies[1], user


def test_acl_log_records_denials_and_failed_authentications_as_redis(users_pair):
    for client in users_pair:
        client.execute_command("ACL", "SETUSER", "acl_frank", "on", ">pw", "allcommands")
        connection = authenticated(port_of(client), "acl_frank", "pw")
        for words in (["GET", "k"], ["GET", "k"], ["PUBLISH", "news", "x"], ["EVAL", "return redis.call('get','k')", "0"]):
            reply(connection, *words)
        # MULTI on the user's connection (a redis-py pipeline would take another from the pool).
        assert [reply(connection, *words) for words in (["MULTI"], ["GET", "k"], ["EXEC"])][1].startswith("error: this user has no permissions")
        # A failed AUTH is logged too (redis-py drops a connection whose AUTH failed).
        with pytest.raises(redis.AuthenticationError):
            connection.execute_command("AUTH", "acl_frank", "wrong")
        connection.close()

    def entries(client):
        kept = ("count", "reason", "context", "object", "username")
        return [{field: entry[field] for field in kept} for entry in client.execute_command("ACL", "LOG")]

    ours, theirs = (entries(client) for client in users_pair)
    assert ours == theirs
    assert [entry["reason"] for entry in ours] == ["auth", "key", "key", "channel", "key"]
    assert [entry["context"] for entry in ours[:3]] == ["toplevel", "multi", "lua"] and ours[-1]["count"] == 2
    assert all(entry["client-info"].startswith("id=") and entry["age-seconds"] >= 0 for entry in users_pair[0].execute_command("ACL", "LOG", "2"))
    assert [reply(client, "ACL", "LOG", "1").__len__() for client in users_pair] == [1, 1]
    assert [reply(client, "ACL", "LOG", "RESET") for client in users_pair] == ["OK", "OK"]
    assert [reply(client, "ACL", "LOG") for client in users_pair] == [[], []]


def test_users_authenticate_and_client_list_names_them(make_server):
    server = make_server()
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "acl_alice", "on", ">pw", "+@all", "~*")
    alice = authenticated(server.port, "acl_alice", "pw")
    assert alice.execute_command("ACL", "WHOAMI") == "acl_alice"
    assert "user=acl_alice" in alice.execute_command("CLIENT", "INFO")
    assert any(client["user"] == "acl_alice" for client in admin.client_list())
    # Turning a user off stops new authentications, not the connections it has (as Redis).
    admin.execute_command("ACL", "SETUSER", "acl_alice", "off")
    with pytest.raises(redis.AuthenticationError):
        authenticated(server.port, "acl_alice", "pw")
    assert alice.set("k", "v")
    # Taking a permission away applies to the user's open connections at their next command.
    admin.execute_command("ACL", "SETUSER", "acl_alice", "resetkeys")
    with pytest.raises(redis.ResponseError, match="no permissions to access one of the keys"):
        alice.get("k")
    other = authenticated(server.port, "default", "")
    assert admin.execute_command("CLIENT", "KILL", "USER", "acl_alice", "SKIPME", "no") == 1
    assert reply(admin, "CLIENT", "KILL", "USER", "acl_nobody") == "error: No such user 'acl_nobody'"
    assert other.ping(), "a client of another user stays"
    other.close()
    alice.close()
    admin.execute_command("ACL", "SETUSER", "acl_alice", "on")
    alice = authenticated(server.port, "acl_alice", "pw")
    # Deleting a user disconnects its clients.
    assert admin.execute_command("ACL", "DELUSER", "acl_alice") == 1
    wait_until(lambda: all(client["user"] != "acl_alice" for client in admin.client_list()))
    with pytest.raises(redis.ConnectionError, match="Connection closed by server"):
        alice.ping()
    alice.close()


def test_the_default_user_s_password_by_acl_and_by_config_set(make_server):
    server = make_server()
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "default", ">pw")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=server.port, single_connection_client=True, retry=NO_RETRY).get("k")
    # RESET makes the connection the default user's again, unauthenticated now a password is
    # needed (raw: redis-py would connect again and authenticate).
    answers = raw_exchange(server.port, read_timeout=0.5, payload=b"AUTH pw\r\nACL WHOAMI\r\nRESET\r\nGET k\r\n")
    assert answers == b"+OK\r\n$7\r\ndefault\r\n+RESET\r\n-NOAUTH Authentication required.\r\n"
    admin.config_set("requirepass", "other")
    assert any(line.startswith("user default on #") for line in admin.execute_command("ACL", "LIST"))
    assert authenticated(server.port, "default", "other").ping()
    admin.config_set("requirepass", "")
    assert "user default on nopass ~* &* +@all" in admin.execute_command("ACL", "LIST")
    assert redis.Redis(port=server.port).ping()


def test_a_user_that_loses_its_channels_loses_its_subscribers_as_redis(users_pair):
    for client in users_pair:
        client.execute_command("ACL", "SETUSER", "acl_gina", "on", ">pw", "allcommands", "allkeys", "allchannels")
        subscriber = authenticated(port_of(client), "acl_gina", "pw")
        publisher = authenticated(port_of(client), "acl_gina", "pw")
        pubsub = subscriber.pubsub()
        pubsub.subscribe("news")
        assert pubsub.get_message(timeout=2)["type"] == "subscribe"
        client.execute_command("ACL", "SETUSER", "acl_gina", "resetchannels")
        wait_until(lambda: all(entry["user"] != "acl_gina" or entry["sub"] == "0" for entry in client.client_list()))
        assert publisher.ping(), "a client that subscribed to nothing stays"
        pubsub.close()
        subscriber.close()
        publisher.close()
