"""The Epilog's summary at the end of a profiled job's output file (issue 45, "findings
where people already look"): which jobs get it, where Slurm says the file is, and that
root appends only to a regular file the job's user alone owns. Real files under tmp_path;
the test runs as root (chown to nobody), as the Epilog does."""

from __future__ import annotations

import json
import os

import pytest

from workloads.autoprofile.slurm import append_summary, output_file, profiled_runs

NOBODY = 65534
SUMMARY = json.dumps({"job_id": "7", "runs": [{"run_id": "slurm-7", "images_per_second": 9}]})

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def test_only_a_job_with_runs_is_profiled():
    assert profiled_runs(SUMMARY) == ["slurm-7"]
    assert profiled_runs(json.dumps({"job_id": "8", "runs": []})) == []
    assert profiled_runs("this collector printed no JSON") == []


def test_the_output_file_is_scontrols_stdout():
    line = "JobId=7 JobName=wrap UserId=alice(1000) StdErr=/home/alice/7.err StdIn=/dev/null "
    assert output_file(line + "StdOut=/home/alice/slurm-7.out Power=") == "/home/alice/slurm-7.out"
    assert output_file(line + "StdOut=(null)") is None
    assert output_file("JobId=7") is None


@needs_root
def test_a_regular_file_of_the_jobs_user_gets_the_summary_at_its_end(tmp_path):
    out = tmp_path / "slurm-7.out"
    out.write_text("epoch 2: loss 1.099\ndone\n")
    os.chown(out, NOBODY, NOBODY)
    assert append_summary(str(out), NOBODY, SUMMARY + "\n", "7") == f"appended to {out}"
    assert out.read_text() == (
        f"epoch 2: loss 1.099\ndone\n\nepochscope: collector job 7 --summary\n{SUMMARY}\n"
    )


@needs_root
def test_root_never_appends_through_a_link_or_to_someone_elses_file(tmp_path):
    precious = tmp_path / "precious"  # root's, as /etc/shadow would be
    precious.write_text("root's\n")
    link = tmp_path / "link.out"
    link.symlink_to(precious)
    said = append_summary(str(link), NOBODY, SUMMARY, "7")
    assert said.startswith(f"cannot append to {link}: ")
    hard = tmp_path / "hard.out"
    os.link(precious, hard)  # a hard link: not the job user's
    assert append_summary(str(hard), NOBODY, SUMMARY, "7").endswith("summary not appended")
    assert precious.read_text() == "root's\n"
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY, NOBODY)
    said = append_summary(str(fifo), NOBODY, SUMMARY, "7")  # no reader: must not block
    assert said.startswith(f"cannot append to {fifo}") or said.endswith("not appended")
