"""The CPUs a rank computes on, for its ``run_start``: its compute threads and where that
count came from, its loader workers, the CPUs it may run on and its cgroup CPU quota.

Where the thread count came from matters as much as the count: ``torchrun`` sets
``OMP_NUM_THREADS=1`` for every rank when it starts more than one and the variable is
unset, so a 2-rank run computes with 1 thread per rank where the 1-rank run used every
core. ``OMP_NUM_THREADS`` in the rank's environment but not in its parent's (the launcher's)
was set by that launcher; read from ``/proc/<ppid>/environ`` and ``/proc/<ppid>/cmdline``.

The parsers are pure functions over the text of those files; ``cpu_fields`` reads them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from contract import procfs
from contract.cpulist import (  # noqa: F401 (the rank's quota readers, defined there)
    cgroup_quota,
    cgroup_v1_cpu_path,
    format_cpu_list,
    quota_cpus,
)
from contract.schema import Workload

OMP = "OMP_NUM_THREADS"
# the compute threads the bundled MXNet trainer set in the program (MXNet has no getter)
MXNET_THREADS_ENV = "EPOCHSCOPE_MXNET_THREADS"


def launcher_name(cmdline: bytes) -> str:
    """A short name for the process ``cmdline`` (``/proc/<pid>/cmdline``) runs: the script
    or module after the interpreter (``torchrun``, ``torch.distributed.run``, ``mpirun``)."""
    words = [w.decode(errors="replace") for w in cmdline.split(b"\0") if w]
    if not words:
        return "the parent process"
    program = Path(words[0]).name
    if program.startswith("python"):
        rest = words[1:]
        if len(rest) >= 2 and rest[0] == "-m":
            module = rest[1]
            return "torchrun" if module in ("torch.distributed.run", "torchrun") else module
        if rest and not rest[0].startswith("-"):
            return Path(rest[0]).name
    return program


def threads_source(
    threads: int,
    environ: Mapping[str, str],
    parent_environ: Mapping[str, str] | None,
    parent: str,
    default: int,
) -> str:
    """Where a rank's ``threads`` came from, in words: ``OMP_NUM_THREADS`` set by its
    launcher (``parent``: absent from the parent's environment) or inherited, a call in the
    program (the count matches neither), or the framework's default (``default``)."""
    value = environ.get(OMP, "").strip()
    if value.isdigit() and int(value) == threads:
        if parent_environ is not None and parent_environ.get(OMP, "").strip() != value:
            return f"{OMP}={value} set by {parent}"
        return f"{OMP}={value} from the environment"
    if threads == default and not value:
        return "the framework's default (one per CPU)"
    return "set in the program"


def framework_threads() -> tuple[int | None, int | None]:
    """(compute threads, TensorFlow's inter-op threads) of the frameworks this process has
    imported; never imports one."""
    cpus = len(os.sched_getaffinity(0))
    if "torch" in sys.modules:
        return int(sys.modules["torch"].get_num_threads()), None
    if "tensorflow" in sys.modules:
        threading = sys.modules["tensorflow"].config.threading
        intra = threading.get_intra_op_parallelism_threads() or cpus  # 0: the default
        inter = threading.get_inter_op_parallelism_threads() or cpus
        return int(intra), int(inter)
    if "mxnet" in sys.modules:
        value = (os.environ.get(MXNET_THREADS_ENV) or os.environ.get(OMP, "")).strip()
        return (int(value) if value.isdigit() else cpus), None
    return None, None


def memory_limit(proc: Path, cgroup_root: Path) -> int | None:
    """This process's memory cgroup limit in bytes (``contract.procfs``), or None."""
    try:
        return procfs.memory_limit_bytes((proc / "self" / "cgroup").read_text(), cgroup_root)
    except OSError:
        return None


def cpu_fields(
    loader_workers: int | None = None,
    persistent_workers: bool | None = None,
    proc: Path = Path("/proc"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> dict[str, object]:
    """The ``run_start`` fields of this rank's CPUs (``contract.schema.Workload``), and its
    memory cgroup limit beside its CPU quota: call it once the framework is imported and
    its threads set."""
    cpus = os.sched_getaffinity(0)
    threads, inter = framework_threads()
    fields: dict[str, object] = {
        Workload.CPUS_ALLOWED: format_cpu_list(cpus),
        Workload.CPU_QUOTA_CPUS: cgroup_quota(proc),
        Workload.MEMORY_LIMIT_BYTES: memory_limit(proc, cgroup_root),
        Workload.LOADER_WORKERS: loader_workers,
        Workload.PERSISTENT_WORKERS: None
        if persistent_workers is None
        else int(persistent_workers),
        Workload.INTER_OP_THREADS: inter,
    }
    if threads is not None:
        parent = proc / str(os.getppid())
        try:
            environ_data = (parent / "environ").read_bytes()
            parent_environ: dict[str, str] | None = procfs.parse_environ(environ_data)
            name = launcher_name((parent / "cmdline").read_bytes())
        except OSError:
            parent_environ, name = None, "the parent process"
        fields[Workload.CPU_THREADS] = threads
        fields[Workload.CPU_THREADS_SOURCE] = threads_source(
            threads, os.environ, parent_environ, name, len(cpus)
        )
    return fields
