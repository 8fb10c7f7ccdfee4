"""Scoped tokens (``netserve.tokens``) and what a scope lets through
(``collector.ingest.scopes``): pure parts, no server."""

from __future__ import annotations

import os

import pytest

from collector.ingest.scopes import offered_tokens, within_scope
from collector.lineprotocol import parse_body
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


def test_a_run_token_writes_events_only():
    parsed = parse_body(f'cpu,host=a busy=1 {T0}\nworkload,host=a,run_id=r event="step" {T0}')
    allowed, refused = within_scope(Identity("run", "alice"), parsed)
    assert allowed.groups == [] and len(allowed.events) == 1 and allowed.points == 1
    assert refused == ["1 point(s) of cpu host='a': run:alice may write workload events only"]
