"""Shared test helpers: where the captured host trees are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# ../shared beside the checkout holds the real captured host trees (never edit them).
SHARED = Path(os.environ.get("EPOCHSCOPE_SHARED", REPO_ROOT.parent / "shared"))
FIXTURE_ROOTS = SHARED / "fixtures" / "roots"


def fixture_root(name: str) -> Path:
    root = FIXTURE_ROOTS / name
    if not root.is_dir():
        pytest.fail(f"captured host tree {root} is missing: ../shared must sit beside the repo")
    return root


@pytest.fixture
def repo_env() -> dict[str, str]:
    """Environment for subprocesses that must import this checkout's packages."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# The suite's tiers, one folder each; a test's marker comes from its folder, so
# `pytest -m unit` and `make check` select by tier without a marker on every file.
TIERS = ("unit", "integration", "system", "scenarios")


# Files that hold one node-wide thing, named: files holding different things may run beside
# each other, one thing's files run one after another. `make test`'s second pass runs them
# in 2 pytest-xdist workers (`-m node_wide -n 2 --dist loadfile`: one thing's files are one
# unit of tests/support/scheduling.py). None of them measures the machine, so sharing it
# costs only time.
NODE_WIDE = {
    # slurmctld and slurmd: one Slurm per node, and it sees every job on the node
    "tests/system/test_slurm_real.py": "slurm",
    "tests/system/test_slurm_one_node.py": "slurm",
    "tests/system/test_slurm_stepd_killed.py": "slurm",
    "tests/system/test_slurm_summary_delay.py": "slurm",
    "tests/system/test_slurm_zerotouch.py": "slurm",
    # the deployed "nodes" share this machine's /etc/passwd (useradd and userdel lock it)
    "tests/system/test_ansible_agents_alone.py": "ansible",
    "tests/system/test_ansible_collector_tls.py": "ansible",
    "tests/system/test_ansible_deploy.py": "ansible",
    "tests/system/test_ansible_harness.py": "ansible",
    "tests/system/test_ansible_prometheus_rules.py": "ansible",
    "tests/system/test_ansible_scoped_tokens.py": "ansible",
    "tests/system/test_ansible_slurm_hooks.py": "ansible",
    "tests/system/test_ansible_tls.py": "ansible",
    "tests/system/test_ansible_units.py": "ansible",
    # every documented command as written: the default ports (8086, 8050), `make demo`
    "tests/system/test_docs_commands.py": "documented commands",
    # hosts in network namespaces (/etc/netns, their sshd and agents on fixed ports); the
    # namespace tests that measure a tc rate are SERIAL
    "tests/system/test_cluster_netns.py": "network namespaces",
    "tests/system/test_agent_push_every_host.py": "network namespaces",
    # the launcher's remote-host path: an sshd on 127.0.0.2, a name it treats as another host
    "tests/system/test_workloads_hosts.py": "sshd on 127.0.0.2",
}


# Files whose tests cannot share the machine with any other test: `make test` runs the rest
# with several pytest-xdist workers (`-m "not serial and not node_wide" -n N --dist
# loadfile`, so one file's tests stay on one worker, in order), then NODE_WIDE's, then
# these alone (`-m serial`). Each says why; a test that starts only its own servers on free
# loopback ports and writes only under tmp_path needs no entry.
SERIAL = {
    # network namespaces with a tc rate measured
    "tests/system/test_ceilings_peer.py": "network namespaces and a tc rate measured",
    "tests/system/test_netns_switch.py": "network namespaces and a tc rate measured",
    # real cgroups, the node's page cache, /proc read whole
    "tests/integration/test_ceilings_cgroups.py": "a CPU quota's decode rate measured",
    "tests/integration/test_rank_memory_limit.py": "a real cgroup v1 memory group",
    "tests/integration/test_jobs_gpu.py": "real cgroup v1 job directories",
    "tests/integration/test_sampler_jobs.py": "live cgroups and /proc as jobs",
    "tests/integration/test_sampler_jobs_cached.py": "live cgroup v1 job groups",
    "tests/integration/test_sampler_processes.py": "live /proc and a cgroup v1 group",
    "tests/integration/test_sampler_memory.py": "drops the whole node's page cache",
    "tests/integration/test_edges_real_io.py": "device-wide disk reads and Cached",
    # what is measured is the machine's: memory, CPU time, rates
    "tests/integration/test_collector_memory.py": "a server's RSS measured",
    "tests/system/test_promtool.py": "CPU modes' rates summed to the CPU count",
    "tests/system/test_workloads_frameworks.py": "1 against 2 processes' images/s",
    "tests/system/test_dlio_crosscheck.py": "AU within 2 points of DLIO's sleeps",
    # deadlines a fraction of a second wide, missed beside 3 other workers at load 4-18
    # (the parallel pass's one run, 2026-11-29): a 3000-byte spool drained at 5 ticks a
    # second, a page fetched while slow heads hold the server to its header deadline
    "tests/integration/test_reliability_crash.py": "a 2-tick spool drained in time",
    "tests/integration/test_dashboard_server.py": "a page within the header deadline",
}


# The slowest files of `make test`'s parallel passes, in seconds (setup, call and teardown
# summed from --junitxml; 2 vCPUs of a Zen 3 EPYC at load 1-4, 2026-11-29): handed to
# workers first so that none starts last (scheduling.py). The first pass's tests sum to
# 1,564 s over 177 files; a file not here counts by its number of tests.
LONGEST: dict[str, float] = {
    # 329 s before its two 2-process trainings (85 s and ~40 s) went to a file of their own
    "tests/system/test_frameworks_learn.py": 205,
    "tests/system/test_frameworks_learn_two_processes.py": 125,
    "tests/integration/test_store_faults.py": 98,
    "tests/system/test_launcher.py": 95,
    "tests/system/test_workloads_profile.py": 80,
    "tests/system/test_ddp_comm_hooks.py": 76,
    "tests/integration/test_dashboard_cli.py": 42,
    "tests/system/test_first_hour_runs.py": 42,
    "tests/system/test_dashboard_browser.py": 35,
    # the node-wide pass (its units sum their files)
    "tests/system/test_docs_commands.py": 177,
    "tests/system/test_ansible_deploy.py": 275,
    "tests/system/test_cluster_netns.py": 103,
}


def pytest_collection_modifyitems(config, items) -> None:
    # under pytest-xdist a worker has workerinput: a serial test there would share the machine
    on_worker = hasattr(config, "workerinput")
    grouped = on_worker and config.workerinput.get("node_wide_grouped", False)
    for item in items:
        path = Path(str(item.fspath)).relative_to(REPO_ROOT)
        parts = path.parts
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in TIERS:
            item.add_marker(parts[1])
        thing = NODE_WIDE.get(path.as_posix())
        if thing is not None:
            item.add_marker(pytest.mark.node_wide)
            if on_worker and not grouped:
                reason = f"node-wide ({thing}): `pytest -m node_wide -n 2 --dist loadfile`"
                item.add_marker(pytest.mark.skip(reason=reason))
        why = SERIAL.get(path.as_posix())
        if why is not None:
            item.add_marker(pytest.mark.serial)
            if on_worker:
                reason = f"serial ({why}): run it alone, `pytest -m serial` without -n"
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with NODE_WIDE's files grouped by their thing and the longest
    files first (tests/support/scheduling.py)."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests.support.scheduling import FileScheduling

    class Scheduling(FileScheduling):
        node_wide = NODE_WIDE
        seconds = LONGEST

    return Scheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell each worker whether node-wide files are grouped (see the skip above)."""
    node.workerinput["node_wide_grouped"] = node.config.getoption("dist") == "loadfile"
