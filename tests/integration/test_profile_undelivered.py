"""What a profiled process says at exit when its events could not reach the collector
(issue 45, items 1 and 2): the spool directory it names exists and holds them, and the
`workloads resend` command it prints carries --token-file, as the run had it; with none
kept on disk no directory is named. A real process under `workloads profile`'s
instrumentation (its RUN_ENV, a ``workloads.track`` loop), the collector's port closed."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from pathlib import Path

from workloads.autoprofile.config import RUN_ENV, ProfileConfig
from workloads.record.spec import TOKEN_FILE_ENV

LOOP = """
import workloads.autoprofile.session as session
session.DELIVERY_TIMEOUT_SECONDS = 1.0  # (60 s in a run: long enough for a slow collector)
from workloads import track
track.run(model="hand-rolled", batch_size=4)
with track.epoch():
    for step in range(3):
        track.step(images=4, loss=1.0)
"""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_printed_resend_command_names_the_spool_and_the_token_file(tmp_path, repo_env):
    url = f"http://127.0.0.1:{closed_port()}"
    config = ProfileConfig(run_id="undelivered", collector_url=url,
                           spool_root=str(tmp_path / "spool"), step_every=1)  # fmt: skip
    token_file = tmp_path / "token"
    token_file.write_text("the-token\n")
    token_file.chmod(0o600)
    env = {**repo_env, RUN_ENV: config.encode(), TOKEN_FILE_ENV: str(token_file)}
    done = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "not yet delivered" in line]
    named = line.split(" stay in ", 1)[1].split("; ", 1)[0]
    spool = tmp_path / "spool" / Path(named).name  # (the rank's, with its pid in its name)
    assert Path(named) == spool and spool.name.startswith("rank0")
    command = shlex.split(line.split("send them with: ", 1)[1])
    assert command == ["workloads", "resend", "--spool", str(spool), "--collector", url,
                       "--token-file", str(token_file)]  # fmt: skip
    assert any(p.is_file() and p.stat().st_size for p in spool.rglob("*"))  # held there
    assert "the-token" not in done.stderr
