"""`workloads run --profile --collector URL` warns, for every host of the run, when the agent
on that host's ``--agent-port`` pushes somewhere else (issue #14): the run's node metrics
come from those agents, and one that pushes elsewhere leaves its host out of the report.

Two hosts in network namespaces behind a switch (tests/support/netns.py's ``NetnsCluster``: h1
and h2, each with its own sshd, hostname and /proc/net/tcp), each running a real agent on
port 9711: h1's pushes to the run's collector, h2's to another address. The launcher's
preparation runs on h1 (``prepare``, what `workloads run` does before training): h1 is
checked in-process, h2 over SSH (``workloads check-collector --agent-port``), each looking
at its own agent. Only h2 is warned about, named, with the fix.
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
from test_ansible_harness import REPO_ROOT, SSHD, readable_base_dir
from test_cluster_netns import HOSTS, SSH_PORT, skip_unless_possible, write_ssh_setup

from tests.support.netns import NetnsCluster, wait_for_log

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT_PORT = 9711
COLLECTOR_PORT = 8086

# Runs on h1: the launcher's plan and host preparation, then each host's warnings as JSON.
PREPARE = """\
import json, sys
from workloads.cli import build_parser
from workloads.launch.launcher import plan_run, prepare, remove_tokens
args = build_parser().parse_args(sys.argv[1:])
plan = plan_run(args)
try:
    prepare(plan, args)
finally:
    remove_tokens(plan, args)
print(json.dumps({report.name: report.warnings for report in plan.reports}))
"""


@pytest.fixture(scope="module")
def cluster_with_agents():
    skip_unless_possible(horovod=False)
    base = readable_base_dir("epochscope-push-")
    cluster = NetnsCluster(HOSTS, base)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    try:
        cluster.create()
        keys, client_key, _ = write_ssh_setup(base, cluster)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for host in cluster.namespaces:
            sshd = [str(SSHD), "-D", "-e", "-f", str(keys / f"sshd_config_{host}")]
            _, log = cluster.start("sshd", sshd, env, host)
            wait_for_log(log, f"Server listening on {cluster.addresses[host]}", 30)
        token = "tok-" + secrets.token_hex(12)
        token_file = base / "token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        h1 = cluster.addresses["h1"]
        collector_url = f"http://{h1}:{COLLECTOR_PORT}"
        serve = ["collector", "serve", "--db", str(base / "c.sqlite"), "--token-file"]
        serve += [str(token_file), "--listen", f"{h1}:{COLLECTOR_PORT}"]
        _, log = cluster.start("collector", [sys.executable, "-m", *serve], env, "h1")
        wait_for_log(log, "listening on", 60)
        elsewhere = f"http://{h1}:{COLLECTOR_PORT + 1}"  # another collector, down here
        configs = {}
        for host, push in (("h1", collector_url), ("h2", elsewhere)):
            samplers = ("cpu", "agent")
            configs[host] = cluster.start_agent(host, push, token, env, samplers, AGENT_PORT)
        for host in cluster.namespaces:  # both listen before the check looks for them
            deadline = time.monotonic() + 60
            probe = ["python3", "-c", "import socket, sys; socket.create_connection(("
                     f"'127.0.0.1', {AGENT_PORT}), 1)"]  # fmt: skip
            while True:
                done = run_on(cluster, host, probe, env)
                if done.returncode == 0:
                    break
                assert time.monotonic() < deadline, f"the agent on {host} did not listen"
                time.sleep(0.5)
        yield {
            "cluster": cluster,
            "env": env,
            "base": base,
            "client_key": client_key,
            "token_file": token_file,
            "collector_url": collector_url,
            "elsewhere": elsewhere,
            "configs": configs,
        }
    finally:
        cluster.destroy()
        shutil.rmtree(base, ignore_errors=True)


def run_on(
    cluster: NetnsCluster, host: str, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess:
    return subprocess.run(
        cluster.on_host(host, argv), env=env, capture_output=True, text=True, timeout=300
    )


def test_every_host_whose_agent_pushes_elsewhere_is_warned_about(cluster_with_agents):
    c = cluster_with_agents
    run = (
        f"run --framework pytorch --synthetic --np 2 --hosts h1:1,h2:1 --profile"
        f" --ssh-user root --ssh-port {SSH_PORT} --agent-port {AGENT_PORT}"
    ).split()
    run += ["--collector", c["collector_url"], "--token-file", str(c["token_file"])]
    run += ["--ssh-key", str(c["client_key"]), "--runs-dir", str(c["base"] / "runs")]
    done = run_on(c["cluster"], "h1", [sys.executable, "-c", PREPARE, *run], c["env"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    warnings = json.loads(done.stdout.strip().splitlines()[-1])
    # h1's agent pushes to the run's collector: nothing to say; h2's pushes elsewhere
    assert warnings["h1"] == []
    (warning,) = warnings["h2"]
    assert f"pushes to {c['elsewhere']}, not to {c['collector_url']}" in warning
    assert f'set [push] url = "{c["collector_url"]}" in {c["configs"]["h2"]}' in warning
    # printed before training, naming the host
    assert f"workloads: warning: h2: the agent on :{AGENT_PORT}" in done.stderr
    assert "warning: h1:" not in done.stderr
