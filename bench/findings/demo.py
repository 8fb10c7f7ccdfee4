"""``python -m bench.findings.demo [--repeat N] [--out DIR] [--data DIR]``: the demo's training
(the Makefile's ``DEMO_RUN_ARGS``: TensorFlow ResNet-50, 2 processes, 3 epochs, cold data)
run N times, one at a time, each profiled into its own store; per run the loss and top-1 per
epoch, whether the loss fell, and the findings at critical (issue 42, item 1: 10 demo runs,
no critical finding, a falling loss). A run whose ``demo.json`` exists is skipped, so a
stopped series resumes; ``--report`` only prints the table of what is there.

The data set is the demo's made as a fresh clone makes it (``workloads dataset make`` with
its default 10% validation pictures, so top-1 is measured); the Makefile's own
``runs/demo-data-256x640`` may predate that default and hold no validation split."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = REPO / "Makefile"
DEFAULT_OUT = REPO / "runs" / "demo-eval"
DEFAULT_DATA = REPO / "runs" / "demo-data-256x640-val"
TIMEOUT_S = 1500


def makefile_words(name: str) -> list[str]:
    """A ``NAME := words`` assignment of the Makefile (continued lines joined), $(DEMO_DATA)
    left in place."""
    text = MAKEFILE.read_text().replace("\\\n", " ")
    match = re.search(rf"^{name} := (.*)$", text, re.MULTILINE)
    if match is None:
        raise SystemExit(f"no {name} in {MAKEFILE}")
    return shlex.split(match.group(1))


def demo_run_args(data: Path) -> list[str]:
    return [
        str(data) if word == "$(DEMO_DATA)" else word for word in makefile_words("DEMO_RUN_ARGS")
    ]


def ensure_data(data: Path) -> None:
    if (data / "manifest.json").exists():
        return
    subprocess.run([sys.executable, "-m", "workloads", "dataset", "make",
                    *makefile_words("DEMO_DATA_ARGS"), "--out", str(data)],
                   cwd=REPO, check=True)  # fmt: skip


def summary(report: dict) -> dict:
    """Per epoch the mean loss and top-1 over the hosts' rows; the findings by severity."""
    epochs: dict[int, dict[str, list[float]]] = {}
    for row in report["rows"]:
        values = epochs.setdefault(int(row["epoch"]), {"loss": [], "top1": []})
        for key in ("loss", "top1"):
            if row.get(key) is not None:
                values[key].append(float(row[key]))

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    loss = [mean(epochs[epoch]["loss"]) for epoch in sorted(epochs)]
    top1 = [mean(epochs[epoch]["top1"]) for epoch in sorted(epochs)]
    finite = [value for value in loss if value is not None and math.isfinite(value)]
    return {
        "loss": loss,
        "top1": top1,
        "loss_fell": len(finite) == len(loss) >= 2 and finite[-1] < finite[0],
        "critical": [f["rule"] for f in report["findings"] if f["severity"] == "critical"],
        "warning": [f["rule"] for f in report["findings"] if f["severity"] == "warning"],
    }


def run_once(out: Path, data: Path, index: int) -> dict:
    run_id = f"demo-r{index}"
    work = out / run_id
    work.mkdir(parents=True, exist_ok=True)
    started = {"utc": datetime.now(UTC).isoformat(timespec="seconds"), "load": os.getloadavg()}
    begun = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "run", *demo_run_args(data),
         "--run-id", run_id, "--runs-dir", str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    (work / "output.txt").write_text(result.stdout + result.stderr)
    record: dict = {"run_id": run_id, "started": started, "exit": result.returncode,
                    "seconds": round(time.monotonic() - begun),
                    "load_end": os.getloadavg()}  # fmt: skip
    report = subprocess.run(
        [sys.executable, "-m", "collector", "report", run_id, "--db",
         str(work / f"{run_id}.sqlite"), "--format", "json", "--findings"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    if report.returncode == 0:
        (work / "report.json").write_text(report.stdout)
        record.update(summary(json.loads(report.stdout)))
    record["critical_printed"] = "CRITICAL" in result.stdout
    (work / "demo.json").write_text(json.dumps(record, indent=1))
    return record


def _epochs(values: list | None) -> str:
    return " / ".join("-" if v is None else f"{v:.3g}" for v in values) if values else "-"


def table(out: Path) -> str:
    lines = [
        "| run | started (UTC) | load (1 min) start / end | s | loss per epoch | top-1 per epoch "
        "| loss fell | critical | warnings |",
        "|---|---|---|---:|---|---|---|---|---|",
    ]
    records = [json.loads(p.read_text()) for p in sorted(out.glob("demo-r*/demo.json"))]
    records.sort(key=lambda r: int(r["run_id"].removeprefix("demo-r")))
    for r in records:
        critical = ", ".join(r.get("critical", [])) or ("none" if "critical" in r else "-")
        lines.append(
            f"| {r['run_id']} | {r['started']['utc'][11:19]} | {r['started']['load'][0]:.1f} / "
            f"{r['load_end'][0]:.1f} | {r['seconds']} | {_epochs(r.get('loss'))} "
            f"| {_epochs(r.get('top1'))} | {'yes' if r.get('loss_fell') else 'no'} | {critical} "
            f"| {', '.join(r.get('warning', [])) or 'none'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.findings.demo")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--report", action="store_true", help="only print the table")
    args = parser.parse_args()
    if not args.report:
        ensure_data(args.data)
        for index in range(1, args.repeat + 1):
            if (args.out / f"demo-r{index}" / "demo.json").exists():
                continue
            record = run_once(args.out, args.data, index)
            print(json.dumps(record), flush=True)
    print(table(args.out))


if __name__ == "__main__":
    main()
