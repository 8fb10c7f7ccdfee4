"""What zero-touch profiling costs a Python process that trains nothing, and the TaskProlog.

Side by side, interleaved (round-robin, so the machine's load falls on every variant
alike), ``--runs`` times each:

- ``python -c pass`` bare (a task of a job that did not opt in: the TaskProlog exported
  nothing);
- the same with the site directory first on ``PYTHONPATH`` but no run (its sitecustomize
  chains to the shadowed one and returns);
- opted in: the site directory and ``EPOCHSCOPE_PROFILE_RUN`` as the TaskProlog exports
  them (base64), so the sitecustomize installs the post-import hooks;
- the installed TaskProlog (``hook_script``) for a job that did not opt in and for one that
  did (``comment = ""``: no squeue call; a site that opts in by comment adds one squeue).

Per variant: the median and 90th percentile of the wall time and the median CPU time
(user + system of the child, ``os.wait4``), and, from ``-X importtime``, the median time
the ``sitecustomize`` import itself took. The Python is ``--python`` (default the system's
``/usr/bin/python3``, which has no epochscope: the sitecustomize finds it beside itself, as
in a user's environment). Writes JSON to ``--out``.

    python bench/profile_overhead/site_import.py --runs 40
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from workloads.autoprofile.config import RUN_ENV, ProfileConfig, site_dir  # noqa: E402
from workloads.autoprofile.slurm import hook_script  # noqa: E402

IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|\s+sitecustomize$")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one run."""
    read, write = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: stderr to the pipe, stdout discarded
        os.close(read)
        os.dup2(write, 2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execve(argv[0], argv, env)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed: {b''.join(chunks).decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime, b"".join(chunks).decode(errors="replace")


def summary(walls: list[float], cpus: list[float], imports: list[int]) -> dict:
    ordered = sorted(walls)
    return {
        "runs": len(walls),
        "wall_ms_median": round(statistics.median(walls) * 1e3, 2),
        "wall_ms_p90": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e3, 2),
        "cpu_ms_median": round(statistics.median(cpus) * 1e3, 2),
        "sitecustomize_import_us_median": int(statistics.median(imports)) if imports else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results-site-import.json"
    )
    args = parser.parse_args()
    python = args.python if Path(args.python).is_file() else sys.executable
    work = Path(tempfile.mkdtemp(prefix="site-import-"))
    base = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    config = ProfileConfig("slurm-1", "http://127.0.0.1:9", str(work / "spool"))
    site = str(site_dir())
    site_toml = work / "slurm.toml"
    site_toml.write_text(
        f'collector_url = "http://127.0.0.1:9"\nspool_root = "{work}/spool"\ncomment = ""\n'
    )
    prolog = work / "epochscope-task-prolog"
    prolog.write_text(hook_script("task-prolog", python, str(site_toml), str(REPO)))
    prolog.chmod(0o755)
    job = {"SLURM_JOB_ID": "1", "SLURM_JOB_PARTITION": "cpu"}
    variants = {
        "python -c pass": ([python, "-X", "importtime", "-c", "pass"], base),
        "site dir on PYTHONPATH, no run": (
            [python, "-X", "importtime", "-c", "pass"],
            {**base, "PYTHONPATH": site},
        ),
        "opted in (TaskProlog's exports)": (
            [python, "-X", "importtime", "-c", "pass"],
            {**base, "PYTHONPATH": site, RUN_ENV: config.encode_safe()},
        ),
        "TaskProlog, job not opted in": ([str(prolog)], {**base, **job}),
        "TaskProlog, job opted in": ([str(prolog)], {**base, **job, "EPOCHSCOPE_PROFILE": "1"}),
    }
    got: dict[str, tuple[list[float], list[float], list[int]]] = {
        name: ([], [], []) for name in variants
    }
    for _ in range(2):  # warm the page cache
        for argv, env in variants.values():
            timed(argv, env)
    for _ in range(args.runs):
        for name, (argv, env) in variants.items():
            wall, cpu, err = timed(argv, env)
            walls, cpus, imports = got[name]
            walls.append(wall)
            cpus.append(cpu)
            imports.extend(int(m.group(1)) for m in map(IMPORT_LINE.search, err.splitlines()) if m)
    result = {
        "python": python,
        "python_version": subprocess.run(
            [python, "-V"], capture_output=True, text=True
        ).stdout.strip(),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "variants": {name: summary(*values) for name, values in got.items()},
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'variant':38} {'wall ms':>8} {'p90':>7} {'CPU ms':>7} {'sitecustomize us':>17}")
    for name, row in result["variants"].items():
        imported = row["sitecustomize_import_us_median"]
        shown = "-" if imported is None else str(imported)
        print(f"{name:38} {row['wall_ms_median']:8.1f} {row['wall_ms_p90']:7.1f} "
              f"{row['cpu_ms_median']:7.1f} {shown:>17}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
