"""The all-reduce against the fabric's measured ceiling, on real runs (issue 29).

Two "hosts" are two network namespaces joined by a veth pair (tests/system/test_cluster_netns.py's
``Cluster``), each with a real sshd and agent (net, cpu and ceilings samplers); the
collector runs on h1. From h1 a 1-rank PyTorch ResNet-50 run (the scaling loss's reference)
and two 2-rank runs, one rank per host, DDP over Gloo across the link:

- **open**: the veth as it is (many Gb/s); each host's peer throughput is measured over it;
- **limited**: a ``tc`` token bucket of ``TC_RATE_MBIT`` on both ends; the peer throughput is
  measured again, under the limit, and the agents report it from their next tick.

Tiny synthetic pictures keep compute small while every step still all-reduces the whole
model's gradients (``GRADIENT_BYTES_PER_STEP``, 94 MB): under the limit a step is ~8 s of
transfer beside under a second of compute, so the all-reduce is bandwidth-bound and the
step anatomy's exposed all-reduce wait is most of the transfer; over the open veth the
same bytes take a small part of the step. The scaling-loss finding states the all-reduce's
rate as a share of the measured link: "bandwidth-bound" for the limited run, and for the
open one "not bandwidth" or, where the rate over the wait reads high, "not shown to bound".

The rule moved with these runs. The rate over the wait is an upper bound where the
all-reduce also ran behind backward (not measured for PyTorch), and on the open veth the
wait is a short tail: 56 to 340 ms after 0.5 to 1.5 s of compute. Of six open runs two read
19% and 22% ("not bandwidth"), three read 100%, 164% (load 5-6: the peer's one Python
stream, short of CPU, measured 0.65-0.80 GB/s where it had 1.1-1.8) and 133% (load 2: a
56 ms tail against 1.27 GB/s), and the rule said "bandwidth-bound" for all three. It now
also needs the least the rate can have been, had the all-reduce run behind the whole of
compute too, at 80%: 8-12% on those runs, so the finding says the link is not shown to
bound the all-reduce. (The sixth had no scaling loss to word: its reference ran under
load, as slow per rank as the two ranks; the test then skips, saying so.)

Measured (2 cores shared with other engineers' work):

- limited, 200 Mbit/s, load 2-6: peer ceilings 23.4-23.9 MB/s (tc's payload rate 23.9);
  98.4 MB per node per step on the interface (the 94.1 MB of gradients and their
  headers); waits of 3,251-3,585 ms per step: 118-128% of the link, least 84-93%;
- limited, 100 Mbit/s (this file), load 2-3: peer ceilings 11.95/11.95 MB/s (truth
  11.95); a wait of 7,748 ms of an 8,616 ms step: 105% of the link, least 95%,
  "bandwidth-bound"; the truth's bytes and rate give 101% for that wait (the ~5% above it
  are the frames' headers, which the interface counts and the peer's TCP payload does not);
- open: peer ceilings 0.65-2.1 GB/s, as above.

The module took 133 to 185 s at load 2 to 7 (runs of 12-24, 20-55 and 54-78 s). Load
slows compute, which lowers the limited run's least (7.7 s at the link's rate over wait +
compute: under 80% only past ~2 s of compute, twice what load 6 gave).
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

from collector.findings.base import CEILING_BOUND_SHARE
from contract.schema import Ceiling
from tests.support.views import whole_percent_texts

pytestmark = pytest.mark.timeout(600)

# the network-namespace cluster of tests/system/test_cluster_netns.py, imported by its bare
# name as the system tests import it (they find each other there; this folder would not)
SYSTEM_TESTS = str(Path(__file__).resolve().parents[1] / "system")
if SYSTEM_TESTS not in sys.path:
    sys.path.insert(0, SYSTEM_TESTS)

TC_RATE_MBIT = 100  # 12.5 MB/s of frames each way: ~8 s per step for 94 MB of gradients
TBF = ["tbf", "rate", f"{TC_RATE_MBIT}mbit", "burst", "64kb", "latency", "50ms"]
PAYLOAD_SHARE = 1448 / 1514  # TCP's payload in a full frame (tests/system/test_ceilings_peer.py)
PAYLOAD_RATE = TC_RATE_MBIT * 1e6 / 8 * PAYLOAD_SHARE
CEILING_TOLERANCE = 0.15  # the measured against the truth: the peer's rate, the headers
# fp32 gradients of workloads/train/torch_resnet.py's ResNet50(num_classes=4): 23,516,228
# trainable parameters (25,557,032 with the 1000-class head)
GRADIENT_BYTES_PER_STEP = 23_516_228 * 4
TRAINING = (
    "run --framework pytorch --synthetic --batch-size 2 --image-size 32 --num-classes 4"
    " --epochs 2 --steps-per-epoch 3 --warmup-steps 1 --no-validate"
)


def _start_cluster(base: Path, env: dict[str, str]):
    """The netns pair with sshd (importing this checkout), collector and agents; returns
    (cluster, ceilings files, db, the launcher's arguments and environment)."""
    from test_cluster_netns import (
        AGENT_PORT,
        COLLECTOR_PORT,
        HOSTS,
        SSH_PORT,
        SSHD,
        start_agents,
        write_ssh_setup,
    )

    from tests.support.netns import NetnsCluster, wait_for_log

    cluster = NetnsCluster(HOSTS, base)
    cluster.create()
    keys, client_key, wrapper_dir = write_ssh_setup(base, cluster)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    for host in HOSTS:
        config = keys / f"sshd_config_{host}"
        # torchrun is started over paramiko, which passes no environment: the session's
        config.write_text(config.read_text() + f"SetEnv PYTHONPATH={env['PYTHONPATH']}\n")
        _, log = cluster.start("sshd", [str(SSHD), "-D", "-e", "-f", str(config)], env, host)
        wait_for_log(log, f"Server listening on {cluster.addresses[host]}", 30)
    token_file = base / "token"
    token = "tok-" + secrets.token_hex(12)
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    db = base / "collector.sqlite"
    listen = f"{cluster.addresses['h1']}:{COLLECTOR_PORT}"
    collector_url = f"http://{listen}"
    _, log = cluster.start(
        "collector",
        [sys.executable, "-m", "collector", "serve", "--db", str(db), "--token-file",
         str(token_file), "--listen", listen],
        env, "h1",
    )  # fmt: skip
    ceilings_files = {host: base / f"ceilings-{host}.json" for host in HOSTS}
    start_agents(cluster, collector_url, token, ceilings_files, env)
    wait_for_log(log, "listening on", 60)
    launcher = ["--ssh-user", "root", "--ssh-port", str(SSH_PORT), "--ssh-key", str(client_key),
                "--agent-port", str(AGENT_PORT), "--collector", collector_url,
                "--token-file", str(token_file), "--runs-dir", str(base / "runs")]  # fmt: skip
    launcher_env = dict(env, PATH=f"{wrapper_dir}{os.pathsep}{env['PATH']}")
    return cluster, ceilings_files, db, launcher, launcher_env


def _train(cluster, base, argv: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    result = subprocess.run(
        cluster.on_host("h1", [sys.executable, "-m", "workloads", *argv]),
        env=env, cwd=base, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return time.monotonic() - started


def _peer_ceilings(files: dict[str, Path]) -> dict[str, float]:
    rates = {}
    for host, path in files.items():
        (peer,) = json.loads(path.read_text())["ceilings"]
        assert peer["field"] == str(Ceiling.PEER_THROUGHPUT)
        rates[host] = peer["value"]
    return rates


@pytest.fixture(scope="module")
def runs():
    from test_ansible_harness import REPO_ROOT, readable_base_dir
    from test_cluster_netns import measure_peers, skip_unless_possible

    from tests.support.netns import INTERFACE, run_checked

    skip_unless_possible(horovod=False)
    pytest.importorskip("torch")
    base = readable_base_dir("epochscope-allreduce-")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cluster = None
    try:
        cluster, files, db, launcher, launcher_env = _start_cluster(base, env)
        run_id = f"link-{secrets.token_hex(3)}"
        one = TRAINING + " --np 1 --hosts h1:1"
        two = TRAINING + " --np 2 --hosts h1:1,h2:1"
        walls = {"one": _train(cluster, base, [*one.split(), *launcher, "--run-id",
                                               f"{run_id}-one"], launcher_env)}  # fmt: skip
        ceilings = {}
        for name in ("open", "limited"):
            if name == "limited":
                for ns in cluster.namespaces.values():
                    run_checked(["tc", "-n", ns, "qdisc", "add", "dev", INTERFACE, "root", *TBF])
            measure_peers(cluster, base, env)  # writes files[host]: the agents re-read it
            ceilings[name] = _peer_ceilings(files)
            time.sleep(2)  # a tick of each agent reports the new ceiling before the run
            argv = [*two.split(), *launcher, "--run-id", f"{run_id}-{name}"]
            walls[name] = _train(cluster, base, argv, launcher_env)
        time.sleep(3)  # the agents' last samples reach the collector
        reports = {}
        for name in ("open", "limited"):
            report = run_checked(
                [sys.executable, "-m", "collector", "report", f"{run_id}-{name}", "--db",
                 str(db), "--format", "json", "--findings"],
                env=env, timeout=300,
            )  # fmt: skip
            reports[name] = json.loads(report.stdout)
        print(f"walls {walls}, ceilings {ceilings}, load {os.getloadavg()}")
        yield {"reports": reports, "ceilings": ceilings}
    finally:
        if cluster is not None:
            cluster.destroy()
        shutil.rmtree(base, ignore_errors=True)


def _scaling_loss(report: dict) -> tuple[str, dict]:
    (finding,) = [f for f in report["findings"] if f["rule"] == "scaling_loss"]
    print(finding["explanation"])
    return finding["explanation"], finding["evidence"]["attribution"]


def _exposed_wait(anatomy: dict) -> float:
    (part,) = [p for p in anatomy["parts"] if p["part"] == "communication"]
    return part["run_seconds"]


def test_a_limited_link_makes_the_all_reduce_bandwidth_bound(runs):
    """The truth: the model's gradient bytes cross the link once each way per step (a ring
    all-reduce of two ranks) at tc's payload rate. The measured ceiling is within 15% of
    that rate (tests/system/test_cluster_netns.py saw up to 8% under at load 15); the bytes per
    step are counted on the interface, headers included (~5% more), and an epoch window
    may cut a step's transfer at its edges. The exposed wait is shorter than the transfer
    (DDP starts its buckets during backward), so the rate while the ranks waited is above
    100% of the link; the finding's share is the one the truth gives for that same wait,
    within those tolerances, and says bandwidth-bound."""
    text, anatomy = _scaling_loss(runs["reports"]["limited"])
    ceilings = runs["ceilings"]["limited"]
    for measured in ceilings.values():
        assert measured == pytest.approx(PAYLOAD_RATE, rel=CEILING_TOLERANCE)
    ceiling = anatomy["fabric_ceiling_bytes_per_second"]
    assert ceiling == pytest.approx(sum(ceilings.values()) / len(ceilings), rel=1e-3)
    at_ceiling = anatomy["allreduce_seconds_at_ceiling"]
    assert 0.9 * GRADIENT_BYTES_PER_STEP < at_ceiling * ceiling < 1.15 * GRADIENT_BYTES_PER_STEP
    truth = GRADIENT_BYTES_PER_STEP / PAYLOAD_RATE  # seconds per step on the link
    assert at_ceiling == pytest.approx(truth, rel=CEILING_TOLERANCE)
    assert truth <= anatomy["seconds_per_step"]  # the transfer fits in the step
    wait = _exposed_wait(anatomy)
    share = anatomy["allreduce_ceiling_percent"]
    assert share == pytest.approx(100 * at_ceiling / wait, rel=0.01)
    assert share == pytest.approx(100 * truth / wait, rel=CEILING_TOLERANCE)
    assert share >= 100 * CEILING_BOUND_SHARE
    # even had it also run behind the whole of compute, the link was at its bound
    assert anatomy["allreduce_ceiling_least_percent"] >= 100 * CEILING_BOUND_SHARE
    assert anatomy["parts"][0]["part"] == "communication"  # the largest share of the loss
    assert any(f"{whole}% of the fabric's measured" in text for whole in whole_percent_texts(share))
    assert "bandwidth-bound" in text and "not bandwidth" not in text


def test_an_open_link_is_not_what_bounds_the_all_reduce(runs):
    """The same bytes per step over the veth as it is: its measured ceiling is many times
    the limited one, and never "bandwidth-bound": "not bandwidth" when the rate while the
    ranks waited is under 80% of it (the quieter runs), else not shown to be the link."""
    report = runs["reports"]["open"]
    assert not any("bandwidth-bound" in f["explanation"] for f in report["findings"])
    if not any(f["rule"] == "scaling_loss" for f in report["findings"]):
        pytest.skip("no scaling loss to word: the reference ran as slow per rank (load)")
    text, anatomy = _scaling_loss(report)
    _, limited = _scaling_loss(runs["reports"]["limited"])
    ceiling = anatomy["fabric_ceiling_bytes_per_second"]
    assert ceiling > 10 * limited["fabric_ceiling_bytes_per_second"]
    per_step = anatomy["allreduce_seconds_at_ceiling"] * ceiling
    limited_per_step = (
        limited["allreduce_seconds_at_ceiling"] * limited["fabric_ceiling_bytes_per_second"]
    )
    assert per_step == pytest.approx(limited_per_step, rel=0.10)
    share = anatomy["allreduce_ceiling_percent"]
    assert any(f"{whole}% of the fabric's measured" in text for whole in whole_percent_texts(share))
    assert "bandwidth-bound" not in text
    if share < 100 * CEILING_BOUND_SHARE:
        assert "not bandwidth" in text
    else:  # a short tail after compute reads high (see the docstring)
        assert anatomy["allreduce_ceiling_least_percent"] < 100 * CEILING_BOUND_SHARE
        assert "the link is not shown to bound the all-reduce" in text
