"""The launcher's child processes never outlive ``workloads run``.

horovodrun and torchrun start in a session of their own, so a Ctrl-C at the terminal
reaches the launcher alone, which then stops them in order. A process group is not
enough to find every rank: horovodrun's per-rank "middleman" calls ``setsid()``, so its
ranks sit in sessions of their own. The launcher therefore makes itself a child
subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): what its children leave behind is
re-parented to the launcher instead of init and stays its descendant.

Stopping a run (``stop_descendants``), whatever ended it (SIGINT, SIGTERM, an exception):

0. when the user asked for it (SIGINT or SIGTERM to ``workloads run``), the launcher first
   writes the run's stop file (``RunSpec.stop_file`` names it to the ranks): a rank that
   then gets SIGTERM knows the stop was asked for (``stop_was_asked``), not that another
   rank failed (torchrun and horovodrun also stop the other ranks with SIGTERM then);
1. SIGSTOP to the launcher tool (horovodrun, torchrun), so that it does not answer the
   first rank's exit by freezing the others before they are done;
2. SIGTERM to every rank (a ``workloads worker`` process), which then writes its
   ``run_end`` event (state ``interrupted`` for a stop that was asked for, and exits 0, so
   that the tool sees its ranks done; ``failed`` otherwise) and exits; up to ``grace``
   seconds for that;
3. SIGCONT to the tool and up to ``TOOL_QUIET_SECONDS`` for it to exit by itself (torchrun
   whose ranks all exited 0 says nothing; SIGTERM would make it print a 25-line
   ``SignalException`` traceback); then SIGTERM to its process group; up to 5 s for
   everything to exit;
4. SIGKILL to every descendant still alive, except the ones kept (the embedded
   collector and agent of ``--profile``, which the launcher stops after, agent first).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable

from workloads.record.stopping import STOP_FILE_NAME as STOP_FILE_NAME
from workloads.record.stopping import Interrupted as Interrupted
from workloads.record.stopping import ask_to_stop as ask_to_stop
from workloads.record.stopping import raise_on_signals as raise_on_signals
from workloads.record.stopping import stop_was_asked as stop_was_asked

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
DEFAULT_GRACE_SECONDS = 10.0
TOOL_GRACE_SECONDS = 5.0
TOOL_QUIET_SECONDS = 3.0
POLL_SECONDS = 0.1
RANK_COMMAND = ("-m", "workloads", "worker")


def become_subreaper() -> bool:
    """Orphaned descendants re-parent to this process (Linux >= 3.4); False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def is_rank_command(cmdline: list[str]) -> bool:
    """``[python, "-m", "workloads", "worker", ...]``: one rank of a run, the interpreter's
    one-letter options before ``-m`` allowed (torchrun starts ``python -u -m ...``)."""
    rest = cmdline[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m" and len(rest[0]) == 2:
        rest = rest[1:]
    return tuple(rest[:3]) == RANK_COMMAND


def descendants(keep: Iterable[int] = ()) -> list:
    """This process's live descendants (psutil.Process), without ``keep`` and theirs."""
    import psutil

    kept = set(keep)
    found = []
    stack = list(psutil.Process().children())
    while stack:
        process = stack.pop()
        if process.pid in kept:
            continue
        found.append(process)
        try:
            stack.extend(process.children())
        except psutil.NoSuchProcess:
            continue
    return found


def _signal_each(processes: list, signum: int) -> None:
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signum)


def _alive(processes: list) -> list:
    import psutil

    alive = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def _reap(processes: list, skip: int | None) -> None:
    """Collect the exit status of adopted children (subreaper), so no zombie stays;
    ``skip`` is the child whose status its ``Popen`` collects."""
    import psutil

    me = os.getpid()
    for process in processes:
        with contextlib.suppress(OSError, psutil.Error):  # gone, or not our child after all
            if process.pid != skip and process.ppid() == me:
                os.waitpid(process.pid, os.WNOHANG)


def stop_descendants(
    tool: int | None,
    keep: Iterable[int] = (),
    grace: float = DEFAULT_GRACE_SECONDS,
) -> int:
    """Stop every descendant of this process but ``keep``; returns how many needed SIGKILL.

    ``tool``: the pid of horovodrun or torchrun, started with ``start_new_session``. It is
    paused while the ranks write their last events (left running it would answer the
    first rank's exit by freezing and killing the others), then asked to exit.
    """
    import psutil

    keep = tuple(keep)
    tree = descendants(keep)
    ranks = []
    for process in tree:
        try:
            if is_rank_command(process.cmdline()):
                ranks.append(process)
        except psutil.Error:
            pass
    if tool is not None:
        _send(tool, signal.SIGSTOP)
    _signal_each(ranks, signal.SIGTERM)
    _wait_for_exit(ranks, grace)
    if tool is not None:
        _send(tool, signal.SIGCONT)
        with contextlib.suppress(psutil.NoSuchProcess):
            _wait_for_exit([psutil.Process(tool)], TOOL_QUIET_SECONDS)
        _send_group(tool, signal.SIGTERM)
    tree = _wait_for_exit(tree, TOOL_GRACE_SECONDS, keep)
    left = _alive(tree)
    if tool is not None:
        _send_group(tool, signal.SIGKILL)
    _signal_each(left, signal.SIGKILL)
    # not the tool: its Popen must collect its status itself
    psutil.wait_procs([process for process in left if process.pid != tool], timeout=5)
    _reap(tree, skip=tool)
    return len(left)


def _send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _send_group(leader: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signum)


def _wait_for_exit(processes: list, seconds: float, keep: Iterable[int] | None = None) -> list:
    """Wait up to ``seconds`` for ``processes`` to exit; with ``keep`` given, descendants
    that appear meanwhile (a process adopted as subreaper) are waited for too. Returns
    every process seen."""
    seen = {process.pid: process for process in processes}
    deadline = time.monotonic() + seconds
    while True:
        if keep is not None:
            for process in descendants(keep):
                seen.setdefault(process.pid, process)
        if not _alive(list(seen.values())) or time.monotonic() >= deadline:
            return list(seen.values())
        time.sleep(POLL_SECONDS)
