"""A remote torchrun's stderr (``workloads.launch.hosts.RemoteProcess``) reaches the user's
terminal until the run is being stopped; from then on it goes to the stop log, as horovodrun's
does (``StopRelay``). The real two-host Ctrl-C is tests/system/test_workloads_hosts.py."""

from __future__ import annotations

import io

from workloads.launch.hosts import RemoteProcess


def test_stderr_goes_to_the_terminal_then_to_the_stop_log(tmp_path, capsys):
    before = RemoteProcess(None, 1, io.StringIO(), io.StringIO("loading\nepoch 1\n"))
    before._copy_stderr()
    assert capsys.readouterr().err == "loading\nepoch 1\n"
    assert before.diverted == 0

    traceback = "Traceback (most recent call last):\nChildFailedError:\n"
    stopping = RemoteProcess(None, 1, io.StringIO(), io.StringIO(traceback))
    log = tmp_path / "run" / "torchrun-stop.log"
    stopping.divert(log)
    stopping._copy_stderr()
    assert capsys.readouterr().err == ""
    assert log.read_text() == traceback
    assert stopping.diverted == 2
