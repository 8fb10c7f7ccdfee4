"""Preparing a host of a multi-host run over real SSH: Debian's sshd on 127.0.0.2 with
its own host key, client key and configuration in a temporary directory (no system file
touched), reached by the launcher's paramiko code as a remote host."""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from workloads.cli import build_parser
from workloads.launch.hosts import HostError, RemoteHost, prepare_host
from workloads.launch.launcher import launch_env, plan_run, prepare, remove_tokens
from workloads.launch.local_stack import free_port
from workloads.train import pagecache
from workloads.train.datasets import make_dataset

pytestmark = pytest.mark.timeout(120)
SSHD = Path("/usr/sbin/sshd")
ADDRESS = "127.0.0.2"  # loopback, but not a name the launcher treats as local
SECOND_ADDRESS = "127.0.0.3"  # a second "host" on the same sshd, for two-host runs


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not SSHD.exists() or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (make system-packages)")
    if os.geteuid() != 0:
        pytest.skip("sshd's privilege separation needs root")
    Path("/run/sshd").mkdir(exist_ok=True)
    work = tmp_path_factory.mktemp("sshd")
    os.chmod(work, 0o700)
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / key)],
                       check=True)  # fmt: skip
    (work / "authorized_keys").write_text((work / "client_key.pub").read_text())
    port = free_port(ADDRESS)
    config = work / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress {ADDRESS}\nListenAddress {SECOND_ADDRESS}\n"
        f"HostKey {work / 'host_key'}\n"
        f"AuthorizedKeysFile {work / 'authorized_keys'}\nPidFile {work / 'sshd.pid'}\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        # the remote side imports this checkout, as a shared install would, and evicts
        # only the data set's pages (not the whole shared machine's page cache)
        f"SetEnv PYTHONPATH={REPO_ROOT} {pagecache.DROP_METHOD_ENV}=fadvise\n"
    )
    process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)],
                               stderr=(work / "sshd.log").open("wb"))  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection((ADDRESS, port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        pytest.fail(f"sshd did not start: {(work / 'sshd.log').read_text()}")
    yield port, work / "client_key"
    process.terminate()
    process.wait(10)


class MetricsHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/metrics" else 404)
        self.end_headers()
        self.wfile.write(b"epochscope_up 1\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def agent_on_host():
    """Something answering /metrics on the remote host's address, as an agent does."""
    server = http.server.HTTPServer((ADDRESS, 0), MetricsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_remote_host_is_prepared_over_ssh(sshd, agent_on_host, tmp_path):
    port, key = sshd
    data = tmp_path / "jpeg"
    info = make_dataset(data, "jpeg", images=6, classes=2, image_size=16, progress=False)
    for path in info.paths("train"):
        path.read_bytes()
    remote = RemoteHost(ADDRESS, port=port, key=key)
    try:
        report = prepare_host(remote, sys.executable, data, False, agent_on_host)
        remote.put_private("s3cret", str(tmp_path / "tokens" / "run-x"), sys.executable)
    finally:
        remote.close()
    # the same machine seen through SSH
    assert report.memory_bytes == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert report.cpus == os.cpu_count()
    assert report.agent_answers
    assert report.cache["total_bytes"] == info.train.bytes
    assert report.cache["before_resident_bytes"] == info.train.bytes  # just read
    token = tmp_path / "tokens" / "run-x"
    assert token.read_text() == "s3cret"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600


def test_launcher_prepares_a_remote_host_and_drops_its_cache(sshd, tmp_path):
    port, key = sshd
    data = tmp_path / "jpeg"
    info = make_dataset(data, "jpeg", images=6, classes=2, image_size=16, progress=False)
    args = build_parser().parse_args([
        "run", "--framework", "pytorch", "--data-dir", str(data),
        "--hosts", f"{ADDRESS}:1", "--ssh-port", str(port), "--ssh-key", str(key),
        "--drop-caches", "--agent-port", str(free_port(ADDRESS)), "--token", "t0k",
        "--batch-size", "2",
        "--runs-dir", str(tmp_path / "runs"),
    ])  # fmt: skip
    plan = plan_run(args)
    for path in info.paths("train"):
        path.read_bytes()
    prepare(plan, args)
    (report,) = plan.reports
    assert report.name == ADDRESS and not report.agent_answers
    assert report.cache["before_resident_bytes"] == info.train.bytes
    assert report.cache["after_resident_bytes"] == 0
    # one absolute path, wherever the launcher was started from
    token = tmp_path / "runs" / plan.spec.run_id / "collector.token"
    assert plan.token_file == token
    assert token.read_text() == "t0k" and stat.S_IMODE(token.stat().st_mode) == 0o600
    remove_tokens(plan, args)
    assert not token.exists() and not token.parent.exists()


@pytest.fixture
def collector_with_token(tmp_path):
    """A real ``collector serve`` whose token is "t0k-both"."""
    from bench.reliability import harness

    token_file = tmp_path / "collector-token"
    token_file.write_text("t0k-both\n")
    token_file.chmod(0o600)
    served = harness.Collector(db=tmp_path / "c.sqlite", token_file=token_file,
                               log=tmp_path / "collector.log")  # fmt: skip
    served.start()
    yield served
    served.stop()


def test_token_goes_to_every_host_including_the_launching_one(
    sshd, tmp_path, monkeypatch, collector_with_token
):
    """localhost and 127.0.0.2 (over SSH) are one machine here: the file is written by
    both paths to the same absolute place, and ranks started anywhere find it there; the
    collector takes the token from the remote host too (checked there, before training)."""
    port, key = sshd
    monkeypatch.chdir(tmp_path)  # a relative --runs-dir is made absolute once, here
    args = build_parser().parse_args([
        "run", "--framework", "pytorch", "--synthetic", "--np", "2",
        "--hosts", f"localhost:1,{ADDRESS}:1", "--ssh-port", str(port), "--ssh-key", str(key),
        "--agent-port", str(free_port(ADDRESS)), "--token", "t0k-both",
        "--collector", collector_with_token.url, "--runs-dir", "runs",
    ])  # fmt: skip
    plan = plan_run(args)
    assert plan.token_file == tmp_path / "runs" / plan.spec.run_id / "collector.token"
    prepare(plan, args)
    assert [host.name for host in plan.token_written_on] == ["localhost", ADDRESS]
    assert plan.token_file.read_text() == "t0k-both"
    assert stat.S_IMODE(plan.token_file.stat().st_mode) == 0o600
    env = launch_env(plan)
    assert env["EPOCHSCOPE_WORKLOAD_TOKEN_FILE"] == str(plan.token_file)
    assert "t0k-both" not in "".join(env.values())
    remove_tokens(plan, args)
    assert not plan.token_file.exists()


def test_a_host_whose_token_the_collector_refuses_stops_the_run_before_training(
    sshd, tmp_path, collector_with_token
):
    """The check runs on every host with the token file its ranks will read: a host that
    cannot deliver is named before anything trains."""
    port, key = sshd
    args = build_parser().parse_args([
        "run", "--framework", "pytorch", "--synthetic", "--np", "1",
        "--hosts", f"{ADDRESS}:1", "--ssh-port", str(port), "--ssh-key", str(key),
        "--agent-port", str(free_port(ADDRESS)), "--token", "not-the-token",
        "--collector", collector_with_token.url, "--runs-dir", str(tmp_path / "runs"),
    ])  # fmt: skip
    plan = plan_run(args)
    with pytest.raises(HostError, match=rf"{ADDRESS}: the collector at .* refused the token "
                       rf"from --token-file {plan.token_file} \(from "):  # fmt: skip
        prepare(plan, args)
    remove_tokens(plan, args)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.timeout(300)
def test_ctrl_c_on_a_two_host_pytorch_run_stops_every_host_as_interrupted(sshd, tmp_path):
    """torchrun started over SSH on two hosts: Ctrl-C writes the stop file on each host
    and sends each torchrun SIGTERM, so every rank ends the run as interrupted (one state),
    no traceback is shown, and nothing of the run outlives the launcher."""
    pytest.importorskip("torch")
    from contract.schema import Event, RunState, Workload
    from workloads.launch.summary import read_events_dir

    port, key = sshd
    runs, run_id = tmp_path / "runs", "two-host-stop"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    launcher = subprocess.Popen(
        [sys.executable, "-m", "workloads", "run", "--framework", "pytorch", "--synthetic",
         "--np", "2", "--hosts", f"{ADDRESS}:1,{SECOND_ADDRESS}:1", "--ssh-port", str(port),
         "--ssh-key", str(key), "--epochs", "50", "--steps-per-epoch", "6",
         "--batch-size", "2", "--image-size", "32", "--num-classes", "4", "--warmup-steps",
         "1", "--run-id", run_id, "--runs-dir", str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    events = runs / run_id / "events"
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and launcher.poll() is None:
        ends = [p for p in read_events_dir(events) if p.fields.get(Workload.EVENT)
                == Event.EPOCH_END] if events.is_dir() else []  # fmt: skip
        if ends:
            break
        time.sleep(1)
    assert launcher.poll() is None, launcher.communicate()
    launcher.send_signal(signal.SIGINT)
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    assert "Traceback" not in err and "SignalException" not in err, err[-3000:]
    assert f"run {run_id} stopped by" in out and "marked interrupted" in out
    states = {
        point.tags.get("rank"): point.fields[Workload.STATE]
        for point in read_events_dir(events)
        if point.fields.get(Workload.EVENT) == Event.RUN_END
    }
    assert states == {"0": RunState.INTERRUPTED, "1": RunState.INTERRUPTED}
    left = subprocess.run(["pgrep", "-f", f"--run-id {run_id}"], capture_output=True, text=True)
    assert left.stdout == "", f"processes of the run left behind: {left.stdout}"
