"""What one push request costs the sender: influxdb-client against ``http.client``.

The shipper (the agent's samples every 5 s, each training rank's events at most once a
second) sent with influxdb-client's synchronous write API until session 8 and now sends
with ``agent.shipper.HttpWriter``. This bench measures both side by side in one run,
against a real ``collector serve`` on loopback:

- each round starts one fresh interpreter per variant (the order alternates round by
  round); it builds the writer, sends one warm-up request, then ``--requests`` requests
  of a body the size of a second of a rank's events (``--lines`` lines), one after the
  other, each answered 204;
- CPU per request = the interpreter's ``time.process_time()`` over those requests /
  their number; resident memory = VmRSS after them (the writer's imports included).

    python bench/agent_overhead/writer_cost.py --rounds 5 --requests 500 \
        --out bench/agent_overhead/results/writer-cost.json
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
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SENDER = r"""
import json, sys, time
url, variant, requests, lines = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
body = b"".join(
    b"workload,host=n1,run_id=bench,rank=0 step=%di,images=64i,seconds=0.25 %d\n"
    % (n, 10**18 + n) for n in range(lines)
)
if variant == "influxdb-client":  # as agent/shipper.py's InfluxWriter called it
    from influxdb_client.client.influxdb_client import InfluxDBClient
    from influxdb_client.client.write_api import SYNCHRONOUS
    from influxdb_client.domain.write_precision import WritePrecision

    client = InfluxDBClient(url=url, token="t", org="o", timeout=10_000, retries=False)
    api = client.write_api(write_options=SYNCHRONOUS)

    def send():
        api.write(bucket="b", org="o", record=body, write_precision=WritePrecision.NS)
else:
    from agent.shipper import HttpWriter

    writer = HttpWriter(url, "t", "o", "b")

    def send():
        outcome = writer.write(body)
        assert outcome.delivered, outcome

send()  # connection and first-use costs: not counted
started = time.process_time()
for _ in range(requests):
    send()
cpu = time.process_time() - started
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
print(json.dumps({"cpu_per_request_ms": 1000 * cpu / requests, "rss_bytes": rss}))
"""


def start_collector(workdir: Path) -> tuple[subprocess.Popen, str]:
    log = workdir / "collector.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", str(workdir / "c.sqlite"),
         "--listen", "127.0.0.1:0", "--parse-workers", "1"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO_ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if match := re.search(r"listening on (http://[\d.]+:\d+)", log.read_text()):
            return process, match[1]
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"collector did not start: {log.read_text()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--lines", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    variants = ["influxdb-client", "http.client"]
    results: dict[str, list[dict]] = {variant: [] for variant in variants}
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with tempfile.TemporaryDirectory() as workdir:
        collector, url = start_collector(Path(workdir))
        try:
            for round_number in range(args.rounds):
                order = variants if round_number % 2 == 0 else variants[::-1]
                for variant in order:
                    output = subprocess.run(
                        [sys.executable, "-c", SENDER, url, variant, str(args.requests),
                         str(args.lines)],
                        capture_output=True, text=True, check=True, env=env,
                    ).stdout  # fmt: skip
                    results[variant].append(json.loads(output))
                    print(round_number, variant, results[variant][-1], flush=True)
        finally:
            collector.terminate()
            collector.wait()
    summary = {
        variant: {
            "cpu_per_request_ms_median": statistics.median(r["cpu_per_request_ms"] for r in rounds),
            "cpu_per_request_ms_range": [
                min(r["cpu_per_request_ms"] for r in rounds),
                max(r["cpu_per_request_ms"] for r in rounds),
            ],
            "rss_mb_median": statistics.median(r["rss_bytes"] for r in rounds) / 1e6,
        }
        for variant, rounds in results.items()
    }
    ratio = (
        summary["http.client"]["cpu_per_request_ms_median"]
        / summary["influxdb-client"]["cpu_per_request_ms_median"]
    )
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg()[0],
        "settings": vars(args) | {"out": str(args.out)},
        "rounds": results,
        "summary": summary,
        "cpu_ratio_http_client_over_influxdb_client": ratio,
    }
    print(json.dumps(report["summary"], indent=1), f"\nCPU ratio: {ratio:.3f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
