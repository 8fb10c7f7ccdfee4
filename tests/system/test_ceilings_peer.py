"""The measured peer throughput (``agent ceilings --peer`` against ``--serve-peer``): a
real receiver on loopback, the file's other ceilings kept by ``--peer-only``, and, over
the two-host network-namespace pair with a ``tc`` token bucket on its link, a measured
rate within 10% of the rate tc sets."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from agent import ceilings, peer
from contract.schema import Ceiling

MB = 1e6


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node2", ("node2", peer.DEFAULT_PORT)),
        ("10.0.0.2:6000", ("10.0.0.2", 6000)),
        ("[fe80::1]:6000", ("fe80::1", 6000)),
        ("fe80::1", ("fe80::1", peer.DEFAULT_PORT)),
    ],
)
def test_parse_peer(text, expected):
    assert peer.parse_peer(text) == expected


@pytest.mark.parametrize("text", ["", ":80", "node2:0", "node2:70000", "[fe80::1]x"])
def test_parse_peer_refuses(text):
    with pytest.raises(ValueError):
        peer.parse_peer(text)


class Receiver:
    """``peer.serve`` on a loopback port in a thread, for ``lifetime`` seconds."""

    def __init__(self, lifetime: float, **bounds) -> None:
        self.bound = threading.Event()
        self.port = 0
        self.count: int | None = None

        def ready(address: str, port: int) -> None:
            self.port = port
            self.bound.set()

        def run() -> None:
            self.count = peer.serve("127.0.0.1", 0, lifetime, ready=ready, **bounds)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.bound.wait(10)


def test_loopback_throughput_is_the_receivers_count():
    receiver = Receiver(lifetime=3.0)
    received = peer.measure("127.0.0.1", receiver.port, 1.0)
    # the warm-up is left out: what remains is most of the second, and bytes were moved
    assert 0.3 < received.seconds <= 1.0 and received.bytes > 10 * MB
    # a sender that does not speak the protocol is closed unread, and the receiver goes on
    with socket.create_connection(("127.0.0.1", receiver.port), timeout=5) as stranger:
        stranger.sendall(b"GET / HTTP/1.1\r\n\r\n")
        try:
            answer = stranger.recv(16)
        except ConnectionResetError:  # closed with our bytes unread: a reset
            answer = b""
        assert answer == b""
    receiver.thread.join(5)
    assert receiver.count == 1


def test_a_sender_is_cut_at_the_receivers_byte_bound():
    receiver = Receiver(lifetime=2.0, max_bytes=4 << 20)
    with pytest.raises(OSError):  # the receiver answered and closed while it still sent
        peer.measure("127.0.0.1", receiver.port, 2.0)
    receiver.thread.join(5)
    assert receiver.count == 1


def test_peer_only_keeps_the_files_other_ceilings(tmp_path, repo_env):
    kept = tmp_path / "ceilings.json"
    disk = ceilings.Measured(str(Ceiling.DISK_SEQUENTIAL_READ), "sda", "disk", "o_direct", 2e8, 1)
    old_peer = ceilings.Measured(str(Ceiling.PEER_THROUGHPUT), "n9:5291", "net", "tcp", 1.0, 1)
    kept.write_text(ceilings.to_json([disk, old_peer]))
    receiver = subprocess.Popen(
        [sys.executable, "-m", "agent", "ceilings", "--serve-peer", "--port", "0",
         "--serve-seconds", "20"],
        stdout=subprocess.PIPE, text=True, env=repo_env,
    )  # fmt: skip
    try:
        port = int(receiver.stdout.readline().split()[2].rsplit(":", 1)[1])
        result = subprocess.run(
            [sys.executable, "-m", "agent", "ceilings", "--peer", f"127.0.0.1:{port}",
             "--peer-only", "--peer-seconds", "1", "--out", str(kept)],
            capture_output=True, text=True, env=repo_env, timeout=60,
        )  # fmt: skip
    finally:
        receiver.terminate()
        receiver.wait(10)
    assert result.returncode == 0, result.stderr
    assert "peer_throughput_bytes_per_second" in result.stdout
    disk_again, measured = ceilings.from_json(kept.read_text())
    assert disk_again == disk  # kept as it was; the earlier peer replaced
    assert (measured.device, measured.kind, measured.method) == (f"127.0.0.1:{port}", "net", "tcp")
    assert measured.value > 10 * MB and measured.measured_at > time.time() - 60


def test_an_unreachable_peer_is_an_error_and_keeps_the_file(tmp_path, repo_env):
    kept = tmp_path / "ceilings.json"
    kept.write_text(ceilings.to_json([]))
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "agent", "ceilings", "--peer", f"127.0.0.1:{port}",
         "--peer-only", "--out", str(kept)],
        capture_output=True, text=True, env=repo_env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "--serve-peer" in result.stderr
    assert ceilings.from_json(kept.read_text()) == []


TC_RATE_MBIT = 200
# tbf counts whole frames: a full TCP segment carries 1448 payload bytes (MTU 1500 less IP,
# TCP and timestamp headers) in 1514 bytes on the veth (the Ethernet header added)
TCP_PAYLOAD_SHARE = 1448 / 1514


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_over_a_tc_limited_link_the_peer_rate_is_the_tc_rate(tmp_path, repo_env):
    """Two network namespaces behind a switch (tests/support/netns.py's NetnsCluster); a
    token bucket (tc tbf) on h1's side sets its link to 200 Mbit/s. The rate
    counts whole frames, so TCP's payload can be ~95.6% of it (``TCP_PAYLOAD_SHARE``):
    the measurement must land within 10% of that, and so also within 10% of the tc rate
    itself (measured here: 23.3 MB/s of 23.9 payload, 25.0 tc, at load average 9 on 2
    cores; a sender needs a few % of a core for 25 MB/s, so load hardly moves it)."""
    from test_cluster_netns import skip_unless_possible

    from tests.support.netns import NetnsCluster, run_checked

    skip_unless_possible(horovod=False)
    cluster = NetnsCluster(("h1", "h2"), tmp_path)
    try:
        cluster.create()
        h1, h2 = cluster.namespaces["h1"], cluster.namespaces["h2"]
        bucket = ["tbf", "rate", f"{TC_RATE_MBIT}mbit", "burst", "64kb", "latency", "50ms"]
        run_checked(["tc", "-n", h1, "qdisc", "add", "dev", "eth0", "root", *bucket])
        receiver = subprocess.Popen(
            ["ip", "netns", "exec", h2, sys.executable, "-m", "agent", "ceilings",
             "--serve-peer", "--bind", cluster.addresses["h2"], "--serve-seconds", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=repo_env,
        )  # fmt: skip
        cluster.processes.append(receiver)
        assert receiver.stdout.readline().startswith("receiving on"), receiver.stderr.read()
        kept = tmp_path / "ceilings.json"
        result = run_checked(
            ["ip", "netns", "exec", h1, sys.executable, "-m", "agent", "ceilings",
             "--peer", cluster.addresses["h2"], "--peer-only", "--peer-seconds", "4",
             "--out", str(kept)],
            env=repo_env, timeout=60,
        )  # fmt: skip
        print(result.stdout)
        (measured,) = ceilings.from_json(kept.read_text())
        assert measured.device == f"{cluster.addresses['h2']}:{peer.DEFAULT_PORT}"
        tc_rate = TC_RATE_MBIT * 1e6 / 8
        assert measured.value == pytest.approx(tc_rate * TCP_PAYLOAD_SHARE, rel=0.10)
        assert measured.value == pytest.approx(tc_rate, rel=0.10)
    finally:
        cluster.destroy()


def test_the_receiver_exits_once_it_measured_the_senders_it_was_told():
    """``--serve-senders``: the Ansible task's receiver ends when every node has sent, not
    at its (much longer) time bound, so the port is free for the next run."""
    receiver = Receiver(lifetime=60.0, max_transfers=1)
    started = time.monotonic()
    peer.measure("127.0.0.1", receiver.port, 0.3)
    receiver.thread.join(10)
    assert not receiver.thread.is_alive() and receiver.count == 1
    assert time.monotonic() - started < 10
