"""Scoped tokens (``netserve.tokens``) and what a scope lets through
(``collector.ingest.scopes``): pure parts, no server."""

from __future__ import annotations

import os

import pytest

from collector.ingest.ownership import Ownership
from collector.ingest.scopes import offered_tokens, within_scope
from collector.lineprotocol import parse_body
from collector.store import SqliteStore
from netserve.tokens import (
    OPEN,
    Authenticator,
    Identity,
    TokenFileError,
    mint_token,
    parse_tokens_file,
    read_tokens_file,
    revoke_tokens,
    token_digest,
)

T0 = 1_700_000_000_000_000_000


def test_mint_keeps_the_hash_only_in_a_0600_file(tmp_path):
    path = tmp_path / "tokens.json"
    token = mint_token(path, "node", "node07")
    assert token not in path.read_text()
    assert os.stat(path).st_mode & 0o777 == 0o600
    [entry] = read_tokens_file(path)
    assert (entry.digest, entry.scope, entry.subject) == (token_digest(token), "node", "node07")
    assert Authenticator(tokens_file=path).identify(["wrong", token]) == Identity("node", "node07")


def test_revoke_removes_the_subjects_tokens_of_a_scope(tmp_path):
    path = tmp_path / "tokens.json"
    mint_token(path, "node", "n1")
    kept = mint_token(path, "run", "n1")
    assert revoke_tokens(path, "node", "n1") == 1
    assert revoke_tokens(path, "node", "n1") == 0
    assert Authenticator(tokens_file=path).identify([kept]) == Identity("run", "n1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON (line 1"),
        ("[]", 'expected {"version": 1'),
        ('{"tokens": [1]}', "token 1 is not an object"),
        ('{"tokens": [{"sha256": "ab", "scope": "node", "subject": "n"}]}', "64 hex digits"),
        ('{"tokens": [{"sha256": "' + "a" * 64 + '", "scope": "root", "subject": "n"}]}',
         "scope 'root'"),
        ('{"tokens": [{"sha256": "' + "a" * 64 + '", "scope": "node", "subject": "a b"}]}',
         "subject 'a b'"),
    ],
)  # fmt: skip
def test_a_bad_tokens_file_is_refused_naming_the_entry(text, message):
    with pytest.raises(TokenFileError, match="tokens file F") as error:
        parse_tokens_file(text, "tokens file F")
    assert message in str(error.value)


def test_the_single_token_is_an_admin_and_no_token_is_open(tmp_path):
    assert Authenticator().identify([]) is OPEN
    auth = Authenticator(token="s3cret")
    assert auth.identify(["s3cret"]).is_admin
    assert auth.identify(["s3cre", "s3cret2", ""]) is None


def test_offered_tokens_read_every_place_a_write_may_carry_one():
    assert offered_tokens("Token abc", {}, v1=False) == ["abc"]
    assert offered_tokens("Bearer abc", {"p": ["x"]}, v1=False) == ["abc"]
    assert offered_tokens("Basic dTpzZWNyZXQ=", {"p": ["x"]}, v1=True) == ["secret", "x"]


def test_a_node_token_keeps_its_own_hosts_points_only():
    parsed = parse_body(
        f"cpu,host=a busy=1 {T0}\ncpu,host=b busy=2 {T0}\ncpu,host=b busy=3 {T0 + 1}\n"
        f'workload,host=b,run_id=r event="step" {T0}'
    )
    allowed, refused = within_scope(Identity("node", "a"), parsed)
    assert [g.tags["host"] for g in allowed.groups] == ["a"] and allowed.events == []
    assert allowed.points == 1
    assert refused == [
        "2 point(s) of cpu host='b': node:a may write host='a' only",
        "1 workload event(s) of other hosts: node:a may write host='a' only",
    ]
    assert within_scope(Identity("admin", "ops"), parsed) == (parsed, [])


def test_a_run_token_writes_events_and_its_own_runs_series_only(tmp_path):
    """The scope lets a run token's samples through to the owners' check
    (``collector.ingest.ownership``, over a real store file), which keeps those of its own
    run and refuses a host's series."""
    parsed = parse_body(
        f'cpu,host=a busy=1 {T0}\nworkload,host=a,run_id=r event="step" {T0}\n'
        f"rank_stats,host=a,run_id=r loss=0.5 {T0}"
    )
    alice = Identity("run", "alice")
    allowed, refused = within_scope(alice, parsed)
    assert (len(allowed.groups), len(allowed.events), refused) == (2, 1, [])
    with SqliteStore(tmp_path / "s.sqlite") as store:
        allowed, refused = Ownership(store.db).check(alice, allowed)
    assert [g.measurement for g in allowed.groups] == ["rank_stats"]
    assert len(allowed.events) == 1 and allowed.points == 2
    assert refused == ["1 point(s) of cpu: run:alice may write its own runs' and jobs' series only"]


def test_no_token_and_an_admin_are_not_looked_up(tmp_path):
    """Open writes (no tokens) cost no owner look-up and stamp nothing; an admin's neither."""
    parsed = parse_body(f"rank_stats,host=a,run_id=r loss=0.5 {T0}")
    with SqliteStore(tmp_path / "s.sqlite") as store:
        ownership = Ownership(store.db)
        assert ownership.check(OPEN, parsed) == (parsed, [])
        assert ownership.check(Identity("admin", "ops"), parsed) == (parsed, [])
        tables = store.db.read_conn().execute("SELECT name FROM sqlite_master").fetchall()
    assert ("series_owners",) not in tables
