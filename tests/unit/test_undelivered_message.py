"""What a rank says of its undelivered events (issue 45, item 2): the spool directory it
names exists and holds them; with none on disk it names none (before, a PyTorch run
stopped by Ctrl-C pointed to a spool directory that did not exist)."""

from __future__ import annotations

from workloads.record.spec import RunSpec
from workloads.train.worker import undelivered_message


def spec(tmp_path) -> RunSpec:
    return RunSpec("r1", "pytorch", collector_url="http://127.0.0.1:9", spool_root=str(tmp_path))


def test_a_spool_with_events_is_named_with_the_command(tmp_path):
    segment = tmp_path / "rank0" / "segment-0001"
    segment.parent.mkdir()
    segment.write_bytes(b'workload,run_id=r1 event="step" 1\n')
    message = undelivered_message(spec(tmp_path), 0)
    assert f"they wait in {tmp_path / 'rank0'}" in message
    assert "workloads resend --spool" in message


def test_no_spool_on_disk_is_not_named(tmp_path):
    for rank in (0, 1):
        if rank == 1:
            (tmp_path / "rank1").mkdir()  # created, nothing kept in it
        message = undelivered_message(spec(tmp_path), rank)
        assert str(tmp_path) not in message and "workloads resend" not in message
        assert "none kept on disk" in message
