"""``netserve.listen``: one parser of listen addresses for the collector, the agent's
/metrics and the dashboard, each keeping its own default host and wording."""

from __future__ import annotations

import errno

import pytest

from agent.config import ConfigError
from agent.config import parse_listen as agent_listen
from collector.ingest.server import cannot_listen as collector_cannot_listen
from collector.ingest.server import parse_listen as collector_listen
from netserve.listen import (
    ListenError,
    NeedsAuth,
    cannot_listen,
    check_bind,
    is_loopback,
    parse_listen,
    shown,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8086", ("127.0.0.1", 8086)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:9711", ("::1", 9711)),
        ("[::]:9711", ("::", 9711)),
        (":8086", ("default", 8086)),
        ("head-node:65535", ("head-node", 65535)),
    ],
)
def test_the_forms_of_an_address(text, expected):
    assert parse_listen(text, default_host="default") == expected


@pytest.mark.parametrize("text", ["127.0.0.1", "8086", "", "host:", "host:x1", "host:-1", "h:+8"])
def test_not_host_port(text):
    with pytest.raises(ListenError) as refused:
        parse_listen(text)
    assert refused.value.port is None and "HOST:PORT" in str(refused.value)


def test_a_port_out_of_range():
    with pytest.raises(ListenError, match=r"0\.\.65535 \(got 70000\)") as refused:
        parse_listen("127.0.0.1:70000")
    assert refused.value.port == 70000


def test_each_caller_keeps_its_default_host_and_words():
    assert collector_listen(":8086") == ("127.0.0.1", 8086)  # the collector: loopback
    assert agent_listen(":9711").address == "0.0.0.0"  # the agent's /metrics: every address
    assert agent_listen("") is None
    with pytest.raises(SystemExit, match="--listen wants HOST:PORT, got 'nope'"):
        collector_listen("nope")
    with pytest.raises(SystemExit, match=r"0\.\.65535"):
        collector_listen("127.0.0.1:99999")
    with pytest.raises(ConfigError, match="ADDRESS:PORT"):
        agent_listen("nope")


def test_only_loopback_goes_without_auth():
    for host in ("127.0.0.1", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_bind(host, False, "x", "y")
    for host in ("0.0.0.0", "::", "10.0.0.1", "head-node"):
        assert not is_loopback(host)
        check_bind(host, True, "x", "y")
        with pytest.raises(NeedsAuth, match="Give --token"):
            check_bind(host, False, "the data shows", "--token")


def test_cannot_listen_is_one_line_with_the_fix():
    in_use = OSError(errno.EADDRINUSE, "Address already in use")
    line = collector_cannot_listen("127.0.0.1", 8086, in_use)
    assert line.startswith("cannot listen on 127.0.0.1:8086: Address already in use: ")
    assert "(another collector?)" in line and line.endswith("--listen HOST:PORT")
    line = cannot_listen("::1", 80, OSError(errno.EACCES, "Permission denied"), fix="--port")
    assert line.startswith("cannot listen on [::1]:80: ") and "below 1024" in line
    assert "\n" not in line


def test_shown():
    assert shown("::1", 8050) == "[::1]:8050" and shown("10.0.0.1", 1) == "10.0.0.1:1"
