"""Runs the matrix's cases one at a time, each with its cause injected for real, and keeps
under ``OUT/<case>/r<N>/`` the run's store, its ``collector report --format json --findings``
(report.json) and what the evaluation reads (result.json). A case already done is skipped,
so a stopped run resumes. Only the commands' public output is read."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from bench.findings import netns_cases
from bench.findings.evaluate import RunResult, fired_from_report
from bench.findings.matrix import CASES, Case, Data, split_of
from tests.support import real_runs
from tests.support.real_runs import REPO, RunFailed
from workloads.train.pagecache import residency

DEFAULT_OUT = REPO / "runs" / "findings-eval"
# a memory limit that evicted the set leaves at most the room it gave (a third) cached
ALL_RESIDENT = 0.99
DEFAULT_TIMEOUT = 600.0


class NotRunnableHere(RuntimeError):
    """The case needs what this harness or machine does not offer; recorded as skipped."""


@dataclass
class Injected:
    """What an injection changes about the run: a command prefix (a cgroup), environment,
    the data set's path (made elsewhere, e.g. on a loop device)."""

    prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    data: Path | None = None
    # asked once the run is over, from the kernel's own counters: why the cause did not
    # take (a run it did not reach is recorded ``not_injected`` and not scored), or None
    took: Callable[[], str | None] | None = None


Injection = Callable[[Case, Path | None, Path], contextlib.AbstractContextManager[Injected]]


def make_data(root: Path, spec: Data) -> Path:
    path = real_runs.make_data(root, spec.framework, spec.images, spec.val_images,
                               spec.image_size)  # fmt: skip
    if not spec.pad_bytes:
        return path
    padded = path.with_name(f"{path.name}-padded{spec.pad_bytes}")
    if not (padded / ".made").exists():
        subprocess.run(["cp", "-a", str(path), str(padded)], check=True)
        real_runs.pad_jpegs(padded, spec.pad_bytes)
        (padded / ".made").write_text("")
    return padded


@contextmanager
def nothing(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    yield Injected()


@contextmanager
def cached(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    assert data is not None
    real_runs.warm_cache(data)
    yield Injected()


@contextmanager
def cold_throttled_root(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    assert data is not None
    rate = int(case.inject_options["read_bytes_per_second"])
    with real_runs.blkio_read_limit(f"epochscope-bench-{os.getpid()}", data, rate) as prefix:
        real_runs.drop_from_cache(data)
        real_runs.cache_code()
        yield Injected(prefix=prefix)


@contextmanager
def cold_throttled_loop(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    assert data is not None and case.data is not None
    size_mib = 64 + 2 * sum(p.stat().st_size for p in real_runs.data_files(data)) // 2**20
    with real_runs.loop_device(size_mib, work / "loop.img") as mount:
        own = mount / data.name
        subprocess.run(["cp", "-a", str(data), str(own)], check=True)
        rate = int(case.inject_options["read_bytes_per_second"])
        with real_runs.blkio_read_limit(f"epochscope-bench-{os.getpid()}", own, rate) as prefix:
            real_runs.drop_from_cache(own)
            real_runs.cache_code()
            yield Injected(prefix=prefix, data=own)


@contextmanager
def memory_limit(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    """A memory cgroup whose limit leaves the page cache room for ``data_share`` of the set
    beside what the run's own processes take: measured first by the same training in a
    memory group without a limit (its peak resident and mapped memory, sampled at 20 Hz:
    the peak usage less the cache left at the end overstated it by up to 50 MB)."""
    assert data is not None
    data_bytes = sum(p.stat().st_size for p in real_runs.data_files(data))
    real_runs.drop_from_cache(data)
    with real_runs.memory_limit(None) as (group, prefix):
        runs = work / "calibrate"
        runs.mkdir(exist_ok=True)
        command = real_runs.training_command(runs, "calibrate", *_with_data(case.training, data))
        env = real_runs.repo_env(EPOCHSCOPE_DROP_METHOD="fadvise")
        training = subprocess.Popen([*prefix, *command], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        processes_peak = 0  # the group's own memory beside its page cache, sampled at 20 Hz
        while training.poll() is None:
            stat = real_runs.memory_stat(group)
            processes_peak = max(processes_peak, stat["total_rss"] + stat["total_mapped_file"])
            time.sleep(0.05)
        if training.returncode != 0:
            raise RunFailed(f"the calibration run exited {training.returncode}")
    limit = processes_peak + int(data_bytes * case.inject_options["data_share"])
    (work / "memory_limit.json").write_text(
        json.dumps({"processes_peak": processes_peak, "data_bytes": data_bytes, "limit": limit})
    )
    real_runs.drop_from_cache(data)
    with real_runs.memory_limit(limit) as (group, prefix):

        def took() -> str | None:
            # the calibration's peak may leave the later epochs' cache room for the whole
            # set: the group reaches its limit (memory.failcnt) and the kernel reclaims
            # other pages, and the set stays cached to the end (eval-3: 3 of 4 runs)
            resident = residency(real_runs.data_files(data))
            record = json.loads((work / "memory_limit.json").read_text())
            record.update(failcnt=int((group / "memory.failcnt").read_text()),
                          resident_at_end=resident.resident_bytes)  # fmt: skip
            (work / "memory_limit.json").write_text(json.dumps(record))
            if resident.resident_bytes < ALL_RESIDENT * data_bytes:
                return None
            return (f"the data set was still {resident.resident_bytes:,} of {data_bytes:,} B in "
                    f"the page cache at the end (the {limit:,} B limit left it room)")  # fmt: skip

        yield Injected(prefix=prefix, took=took)


@contextmanager
def cpu_hog(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    with real_runs.cpu_hog():
        yield Injected()


@contextmanager
def second_training(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    """The same training started beside the run, into its own store."""
    runs = work / "second"
    runs.mkdir(exist_ok=True)
    training = _with_data(case.training, data)
    command = real_runs.training_command(runs, "second", *training)
    with open(work / "second.log", "w") as log:
        other = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                 env=real_runs.repo_env())  # fmt: skip
        try:
            yield Injected()
        finally:
            try:
                other.wait(timeout=600)
            except subprocess.TimeoutExpired:
                other.kill()
                other.wait()


@contextmanager
def worker_cpu_quota(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    """A CPU quota on the loader workers only, the ranks outside it (so decoding, not
    compute, is slowed): tests/scripts/cause_train.py's ``--cgroup-workers`` moves each
    worker into the group as it starts. (A whole run under the quota slows compute with it:
    the decode-quota case so spent 72-90% of its steps computing and 1-3% waiting for input
    in eval-3.)"""
    with real_runs.cpu_quota_group(case.inject_options["cpus"]) as group:
        yield Injected(env={"CAUSE_CGROUP": str(group)})


@contextmanager
def rank_cpu_quota(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    """tests/scripts/cause_train.py's ``--cgroup-rank R`` moves rank R into the group."""
    with real_runs.cpu_quota_group(case.inject_options["cpus"]) as group:
        yield Injected(env={"CAUSE_CGROUP": str(group)})


@contextmanager
def netns_link(case: Case, data: Path | None, work: Path) -> Iterator[Injected]:
    """Nothing here: ``run_case`` hands these cases to bench/findings/netns_cases.py, which
    builds the two hosts and runs the reference and the 2-host run itself."""
    yield Injected()


INJECTIONS: dict[str, Injection] = {
    "none": nothing,
    "none_labelled": nothing,  # the cause is in the training's own arguments
    "cached": cached,
    "cold_throttled_root": cold_throttled_root,
    "cold_throttled_loop": cold_throttled_loop,
    "memory_limit": memory_limit,
    "cpu_hog": cpu_hog,
    "second_training": second_training,
    "worker_cpu_quota": worker_cpu_quota,
    "rank_cpu_quota": rank_cpu_quota,
    "netns_limited_link": netns_link,
    "netns_open_link": netns_link,
}


def _with_data(arguments: tuple[str, ...], data: Path | None) -> tuple[str, ...]:
    if data is None:
        return arguments
    filled = tuple(a.replace("{data}", str(data)) for a in arguments)
    return filled if filled != arguments or not arguments else (*filled, "--data-dir", str(data))


def _script_command(case: Case, runs: Path, run_id: str, data: Path | None) -> list[str]:
    python = str(Path(case.python).expanduser() / "bin" / "python") if case.python else None
    script = [str(REPO / case.script[0]), *_with_data(case.script[1:], data)]
    extra = {"python": python} if python else {}
    return real_runs.profile_command(runs, run_id, data, script, ranks=case.ranks, **extra)


def run_case(case: Case, repeat: int, out: Path, timeout: float) -> RunResult:
    """Run one case once into ``out/<case>/r<repeat>/``; its result, also written there."""
    work = out / case.name / f"r{repeat}"
    work.mkdir(parents=True, exist_ok=True)
    runs = work / "runs"
    runs.mkdir(exist_ok=True)
    run_id = f"{case.name}-r{repeat}"
    started = time.monotonic()
    try:
        if case.requires == "netns":
            report = netns_cases.run_two_hosts(run_id, case.inject_options.get("rate_mbit"), work)
            (work / "report.json").write_text(json.dumps(report, indent=1))
            result = RunResult(case.name, repeat, "ok", fired_from_report(report),
                               time.monotonic() - started)  # fmt: skip
            write_result(work / "result.json", result, case)
            return result
        data = make_data(out / "data", case.data) if case.data is not None else None
        with INJECTIONS[case.inject](case, data, work) as injected:
            data = injected.data or data
            if case.script:
                command = _script_command(case, runs, run_id, data)
            else:
                command = real_runs.training_command(runs, run_id, *_with_data(case.training, data))
            env = real_runs.repo_env(EPOCHSCOPE_DROP_METHOD="fadvise", **case.env, **injected.env)
            completed = subprocess.run([*injected.prefix, *command], capture_output=True,
                                       text=True, env=env, timeout=timeout, cwd=work)  # fmt: skip
            (work / "output.log").write_text(completed.stdout + completed.stderr)
            if completed.returncode != 0:
                raise RunFailed((completed.stdout + completed.stderr)[-3000:])
            missed = injected.took() if injected.took is not None else None
        report = real_runs.collector_report(runs / f"{run_id}.sqlite", run_id, env)
        (work / "report.json").write_text(json.dumps(report, indent=1))
        result = RunResult(case.name, repeat, "not_injected" if missed else "ok",
                           fired_from_report(report), time.monotonic() - started,
                           error=missed or "")  # fmt: skip
    except NotRunnableHere as reason:
        result = RunResult(case.name, repeat, "skipped", error=str(reason))
    except (RunFailed, subprocess.TimeoutExpired, OSError, subprocess.CalledProcessError) as error:
        result = RunResult(case.name, repeat, "failed", seconds=time.monotonic() - started,
                           error=f"{type(error).__name__}: {error}"[-3000:])  # fmt: skip
    write_result(work / "result.json", result, case)
    return result


def write_result(path: Path, result: RunResult, case: Case) -> None:
    labels = {"must_fire": [asdict(e) for e in case.must_fire], "must_not": list(case.must_not),
              "control": case.control, "split": split_of(case.name)}  # fmt: skip
    record = {**asdict(result), "labels": labels}
    path.write_text(json.dumps(record, indent=1, default=sorted))


def read_result(path: Path) -> RunResult:
    from bench.findings.evaluate import Fired

    record = json.loads(path.read_text())
    fired = tuple(Fired(**f) for f in record["fired"])
    report = path.with_name("report.json")
    if report.exists():  # read again: what a finding's evidence is scored on may have grown
        fired = fired_from_report(json.loads(report.read_text()))
    return RunResult(record["case"], record["repeat"], record["status"], fired,
                     record["seconds"], record["error"])  # fmt: skip


def read_results(out: Path) -> list[RunResult]:
    return [read_result(path) for path in sorted(out.glob("*/r*/result.json"))]


def selected(pattern: str | None) -> list[Case]:
    return [case for case in CASES if pattern is None or fnmatch(case.name, pattern)]


def run_matrix(cases: list[Case], repeat: int, out: Path, timeout: float) -> list[RunResult]:
    from rich.progress import Progress

    todo = [(case, n) for n in range(1, repeat + 1) for case in cases
            if not (out / case.name / f"r{n}" / "result.json").exists()]  # fmt: skip
    results = []
    with Progress() as progress:
        task = progress.add_task("findings matrix", total=len(todo))
        for case, n in todo:
            progress.update(task, description=f"{case.name} r{n}")
            result = run_case(case, n, out, timeout)
            progress.console.print(
                f"{case.name} r{n}: {result.status} in {result.seconds:.0f} s, fired "
                f"{sorted({f.rule for f in result.fired})} {result.error[-300:]}"
            )
            results.append(result)
            progress.advance(task)
    return results
