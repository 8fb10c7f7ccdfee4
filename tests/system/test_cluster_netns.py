"""A two-host cluster in two network namespaces: Horovod over a real link, seen by agents.

The test makes two "hosts" behind one switch (tests/support/netns.py's ``NetnsCluster``:
network namespaces whose addresses exist only inside them, each with a UTS namespace
named h1 or h2 and an /etc/netns/<ns>/hosts naming both). Each host runs a real sshd on
its 10.x address and an agent (net and cpu samplers, 1 s). The collector runs on h1. From
h1,

    workloads run --framework tensorflow --np 2 --hosts h1:1,h2:1 ...

trains ResNet-50 under `horovodrun --gloo`: rank 0 on h1, rank 1 started on h2 over SSH,
gradients all-reduced over their links. The per-epoch report (`collector report
--format json`) then has rows for both hosts, and each host's interface carried the
gradient traffic both ways, rx and tx of the same order.

A `tc` token bucket of ``TC_RATE_MBIT`` on both ends of each host's link sets its rate; before the
run each host measures its peer throughput to the other (`agent ceilings --peer`, the other
running `--serve-peer`) and its agent reports it (the ceilings sampler), so the report
states each epoch's traffic as a share of the measured link.

Needs root (namespaces), iproute2, util-linux `unshare`, OpenSSH and TensorFlow with
Horovod; where any of these is missing the test is skipped and says which.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ansible_harness import REPO_ROOT, SSH_KEYGEN, SSHD, readable_base_dir

from collector.findings.scaling import link_verdict
from tests.support import netns
from tests.support.netns import NetnsCluster, run_checked, wait_for_log
from tests.support.views import whole_percent_texts

pytestmark = [pytest.mark.slow, pytest.mark.frameworks, pytest.mark.timeout(900)]

SSH_PORT = 2222
AGENT_PORT = 9711
COLLECTOR_PORT = 8086
HOSTS = ("h1", "h2")
# Trainable parameters of Keras ResNet50(weights=None, classes=4): 25,583,592 for 1000
# classes minus the 1000-class head (2048*1000 + 1000) plus a 4-class one (2048*4 + 4):
#   25,583,592 - 2,049,000 + 8,196 = 23,542,788, i.e. 94,171,152 bytes of fp32 gradients.
GRADIENT_BYTES_PER_STEP = 23_542_788 * 4


def skip_unless_possible(horovod: bool = True) -> None:
    """Skip unless namespaces, sshd and (``horovod``) Horovod TensorFlow are here."""
    why = netns.missing()
    if why is not None:
        pytest.skip(why)
    if not SSHD.exists():
        pytest.skip(f"{SSHD} is missing (openssh-server)")
    from workloads.launch import frameworks

    try:
        if horovod:
            frameworks.check("tensorflow", 2)
    except frameworks.FrameworkError as error:
        pytest.skip(f"no Horovod TensorFlow here: {error}")


def start_agents(
    cluster: NetnsCluster,
    collector_url: str,
    token: str,
    ceilings_files: dict[str, Path],
    env: dict[str, str],
) -> None:
    """An agent on each host (cpu, net, its own and the ceilings samplers), pushing to
    ``collector_url`` every second, its /metrics on AGENT_PORT for the launcher."""
    for host in HOSTS:
        cluster.start_agent(host, collector_url, token, env, ("cpu", "net", "agent", "ceilings"),
                            AGENT_PORT, ceilings_files[host], batch_seconds=1)  # fmt: skip


TC_RATE_MBIT = 400  # each direction: 50 MB/s, two seconds of gradients per step
PEER_PORT = 5291


def measure_peers(cluster: NetnsCluster, base: Path, env: dict[str, str]) -> dict[str, Path]:
    """Each host's ceilings file with its peer throughput to the other host, measured
    over the rate-limited link (the receiver bound to the other host's address)."""
    files = {}
    for host, other in (HOSTS, HOSTS[::-1]):
        receiver = subprocess.Popen(
            ["ip", "netns", "exec", cluster.namespaces[other], sys.executable, "-m", "agent",
             "ceilings", "--serve-peer", "--bind", cluster.addresses[other],
             "--serve-seconds", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            assert receiver.stdout.readline().startswith("receiving on"), receiver.stderr.read()
            files[host] = base / f"ceilings-{host}.json"
            run_checked(
                ["ip", "netns", "exec", cluster.namespaces[host], sys.executable, "-m",
                 "agent", "ceilings", "--peer", f"{cluster.addresses[other]}:{PEER_PORT}",
                 "--peer-only", "--peer-seconds", "3", "--out", str(files[host])],
                env=env, timeout=60,
            )  # fmt: skip
        finally:
            receiver.terminate()
            receiver.wait(10)
    return files


def write_ssh_setup(base: Path, cluster: NetnsCluster) -> tuple[Path, Path, Path]:
    """Host key, client key, known_hosts and an `ssh` wrapper that keeps horovodrun's ssh
    to these files (never ~/.ssh of the user running the test)."""
    keys = base / "ssh"
    keys.mkdir()
    host_key, client_key = keys / "host_ed25519", keys / "id_ed25519"
    for key in (host_key, client_key):
        run_checked([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    authorized = keys / "authorized_keys"
    authorized.write_text(client_key.with_suffix(".pub").read_text())
    public = host_key.with_suffix(".pub").read_text().split()
    known_hosts = keys / "known_hosts"
    known_hosts.write_text(
        "".join(
            f"{name} {public[0]} {public[1]}\n"
            for host in HOSTS
            for name in (
                host,
                cluster.addresses[host],
                f"[{host}]:{SSH_PORT}",
                f"[{cluster.addresses[host]}]:{SSH_PORT}",
            )
        )
    )
    client_config = keys / "ssh_config"
    client_config.write_text(
        f"IdentityFile {client_key}\nUserKnownHostsFile {known_hosts}\n"
        "GlobalKnownHostsFile /dev/null\nBatchMode yes\nUser root\n"
    )
    wrapper_dir = base / "bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F "{client_config}" "$@"\n')
    wrapper.chmod(0o755)
    for host in HOSTS:
        (keys / f"sshd_config_{host}").write_text(
            f"Port {SSH_PORT}\nListenAddress {cluster.addresses[host]}\nHostKey {host_key}\n"
            f"AuthorizedKeysFile {authorized}\nPidFile none\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nAcceptEnv *\nMaxStartups 64\n"
        )
    return keys, client_key, wrapper_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    skip_unless_possible()
    base = readable_base_dir("epochscope-cluster-")
    cluster = NetnsCluster(HOSTS, base)
    run_id = f"netns-{secrets.token_hex(3)}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    try:
        cluster.create()
        cluster.shape(TC_RATE_MBIT)
        ceilings_files = measure_peers(cluster, base, env)
        keys, client_key, wrapper_dir = write_ssh_setup(base, cluster)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for host in HOSTS:
            sshd = [str(SSHD), "-D", "-e", "-f", str(keys / f"sshd_config_{host}")]
            _, log = cluster.start("sshd", sshd, env, host)
            wait_for_log(log, f"Server listening on {cluster.addresses[host]}", 30)

        token = "tok-" + secrets.token_hex(12)
        token_file = base / "token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        db = base / "collector.sqlite"
        collector_url = f"http://{cluster.addresses['h1']}:{COLLECTOR_PORT}"
        listen = f"{cluster.addresses['h1']}:{COLLECTOR_PORT}"
        serve = ["collector", "serve", "--db", str(db), "--token-file", str(token_file)]
        _, log = cluster.start(
            "collector", [sys.executable, "-m", *serve, "--listen", listen], env, "h1"
        )
        wait_for_log(log, "listening on", 60)
        start_agents(cluster, collector_url, token, ceilings_files, env)

        data = base / "data"
        make = "dataset make --format tfrecord --images 64 --classes 4 --image-size 32 --shards 2"
        run_checked(
            [sys.executable, "-m", "workloads", *make.split(), "--out", str(data)],
            env=env,
            timeout=600,
        )
        steps_per_epoch, epochs = 3, 2
        launcher_env = dict(env)
        launcher_env["PATH"] = f"{wrapper_dir}{os.pathsep}{env['PATH']}"
        training = (
            f"run --framework tensorflow --np 2 --hosts h1:1,h2:1 --batch-size 8 --epochs {epochs}"
            f" --steps-per-epoch {steps_per_epoch} --warmup-steps 1 --no-validate"
            f" --ssh-user root --ssh-port {SSH_PORT} --agent-port {AGENT_PORT}"
        )
        files = ["--data-dir", str(data), "--runs-dir", str(base / "runs"), "--run-id", run_id]
        files += ["--collector", collector_url, "--token-file", str(token_file)]
        files += ["--ssh-key", str(client_key)]
        # the scaling loss's reference: one rank on h1 alone, no all-reduce
        alone = training.replace("--np 2 --hosts h1:1,h2:1", "--np 1 --hosts h1:1").split()
        alone_files = [f"{run_id}-one" if part == run_id else part for part in files]
        for argv in (alone + alone_files, training.split() + files):
            workloads = subprocess.run(
                cluster.on_host("h1", [sys.executable, "-m", "workloads", *argv]),
                env=launcher_env,
                # not $HOME: the token file the ranks read is at one absolute path on each host
                cwd=base,
                capture_output=True,
                text=True,
                timeout=1500,
            )
            output = workloads.stdout + workloads.stderr
            assert workloads.returncode == 0, output[-8000:]
        time.sleep(3)  # the agents' last samples of the run reach the collector
        report = run_checked(
            [
                sys.executable,
                "-m",
                "collector",
                "report",
                run_id,
                "--db",
                str(db),
                "--format",
                "json",
                "--findings",
            ],
            env=env,
            timeout=300,
        )
        yield {
            "ceilings": {
                h: json.loads(f.read_text())["ceilings"] for h, f in ceilings_files.items()
            },
            "rows": json.loads(report.stdout)["rows"],
            "findings": json.loads(report.stdout)["findings"],
            "output": output,
            "steps": steps_per_epoch,
            "epochs": epochs,
        }
    finally:
        cluster.destroy()
        shutil.rmtree(base, ignore_errors=True)


def test_horovod_run_has_epoch_rows_for_both_hosts(trained):
    rows = trained["rows"]
    hosts = {row["host"] for row in rows}
    assert {"h1", "h2"} <= hosts, rows
    for host in HOSTS:
        epochs = sorted(row["epoch"] for row in rows if row["host"] == host)
        assert epochs == list(range(1, trained["epochs"] + 1)) or epochs == list(
            range(trained["epochs"])
        ), rows


def test_gradient_traffic_crosses_both_hosts_interfaces_both_ways(trained):
    host_rows = [row for row in trained["rows"] if row["host"] in HOSTS]
    for host in HOSTS:
        rx = sum(row["net_rx_bytes"] or 0 for row in host_rows if row["host"] == host)
        tx = sum(row["net_tx_bytes"] or 0 for row in host_rows if row["host"] == host)
        # With two ranks every all-reduce moves at least half the gradients each way per
        # step (reduce-scatter half, all-gather half); ask for a quarter of that, since an
        # epoch window may miss a step at its edges.
        least = trained["epochs"] * trained["steps"] * GRADIENT_BYTES_PER_STEP // 4
        print(f"{host}: rx {rx / 1e6:.1f} MB, tx {tx / 1e6:.1f} MB over the run's epochs")
        assert tx > least and rx > least, (host, rx, tx, least)
        assert 0.5 < rx / tx < 2.0, (host, rx, tx)


def test_each_epochs_traffic_is_a_share_of_the_measured_link(trained):
    """Each host measured its peer: at most 47.8 MB/s (50 MB/s of frames, TCP's payload
    share of it; tests/system/test_ceilings_peer.py holds it to 10% on its own). Here, on a machine
    at load 15 on 2 cores, it measured 43.9, 44.6 and 46.0 (up to 8% under), so 15% is
    asked. The report judges the host's busier direction against it."""
    payload_rate = TC_RATE_MBIT * 1e6 / 8 * netns.PAYLOAD_SHARE
    for host in HOSTS:
        (peer,) = trained["ceilings"][host]
        print(f"{host}: peer {peer['device']} {peer['value'] / 1e6:.1f} MB/s")
        assert peer["method"] == "tcp"
        assert peer["value"] == pytest.approx(payload_rate, rel=0.15), peer
        for row in (row for row in trained["rows"] if row["host"] == host):
            assert row["fabric_ceiling_mbps"] == pytest.approx(peer["value"] / 1e6, rel=1e-3)
            busier = max(row["net_rx_bytes"], row["net_tx_bytes"]) / row["seconds"] / 1e6
            share = 100 * busier / row["fabric_ceiling_mbps"]
            print(f"{host} epoch {row['epoch']}: {busier:.1f} MB/s, {share:.1f}% of the link")
            assert row["fabric_ceiling_percent"] == pytest.approx(share, abs=0.2)
            assert 0 < row["fabric_ceiling_percent"] <= 105  # tc lets no more through


def test_the_all_reduce_is_stated_against_the_measured_link(trained):
    """Against the one-rank run, the two ranks lost images/s to an all-reduce over a
    50 MB/s link; the scaling-loss finding states it against the measured link: each node
    sends a whole gradient's bytes per step (half in the reduce-scatter, half in the
    all-gather), 2 s at that rate. Measured in two runs: waits of 809 and 967 ms per step
    for ~98 MB (270% and 225% of the link: Horovod ran the rest behind backward), 2,180 ms
    at the link's rate; two later (load 3-4): 1,331 and 1,182 ms, 156% and 175%, 2,071 ms
    beside 2,257 and 1,637 ms of compute (least 58% and 73%: not shown to be the link).
    On a quiet machine (load 0.9-1.4, 2026-11-28): a wait of 2,066 ms, 101% of the link,
    beside 119 ms of compute: nothing left to hide it behind, bandwidth-bound.
    The whole module took 7.6 min at load 10-15 on 2 cores, 2.6 min at load 3."""
    (finding,) = [f for f in trained["findings"] if f["rule"] == "scaling_loss"]
    anatomy = finding["evidence"]["attribution"]
    print(finding["explanation"])
    (peer,) = trained["ceilings"]["h1"]
    assert anatomy["fabric_ceiling_bytes_per_second"] == pytest.approx(
        (peer["value"] + trained["ceilings"]["h2"][0]["value"]) / 2, rel=1e-3
    )
    share = anatomy["allreduce_ceiling_percent"]
    assert any(
        f"{whole}% of the fabric's measured" in finding["explanation"]
        for whole in whole_percent_texts(share)
    )
    per_step = anatomy["allreduce_seconds_at_ceiling"] * anatomy["fabric_ceiling_bytes_per_second"]
    assert 0.9 * GRADIENT_BYTES_PER_STEP < per_step < 1.3 * GRADIENT_BYTES_PER_STEP
    # the wait is at most the link's time (part may run behind backward): the link's rate
    # or more while waiting. Bandwidth-bound when even behind the whole of compute it ran
    # at 80% of the link; on a loaded machine compute is long (2,257 ms beside a 1,331 ms
    # wait and 2,071 ms at the link's rate: 58%), and the finding may only say the link is
    # not shown to bound it; on a quiet one compute is short and it is bandwidth-bound
    assert share > 90 and "not bandwidth;" not in finding["explanation"]
    # the rule's own verdict on the shares it shows (a least share of 80.0 is at the bound)
    if link_verdict(share, anatomy["allreduce_ceiling_least_percent"]) == "bound":
        assert "bandwidth-bound" in finding["explanation"]
    else:
        assert "the link is not shown to bound the all-reduce" in finding["explanation"]
