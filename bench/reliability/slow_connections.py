"""Idle and slow connections against one ``collector serve``: are writers still served?

    python bench/reliability/slow_connections.py --silent 1000 --trickle 1000 --label after
    python bench/reliability/slow_connections.py --repo OLD_CHECKOUT --nofile 1024 \
        --silent 1100 --trickle 0 --label before-1024

Starts the collector of ``--repo`` (default this checkout) on loopback, optionally under a
fixed open-file limit (``--nofile N``: soft and hard, so it cannot raise it), opens
``--silent`` connections that send nothing and ``--trickle`` connections that send a request
head a byte every ``--seconds-per-byte`` without ever finishing it (interleaved), waits,
then measures the collector for ``--measure-seconds`` (CPU, threads, RSS, descriptors) and
sends ``--writes`` writes, each on a new connection (30 s timeout), and counts what the
slow connections got back (503, 408, closed). Writes JSON to ``results/``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from contract import procfs  # noqa: E402 (the one /proc parser)

HEAD = b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000


def proc_numbers(pid: int) -> dict:
    stat = procfs.parse_stat(Path(f"/proc/{pid}/stat").read_text())
    status = Path(f"/proc/{pid}/status").read_text()
    return {
        "cpu_seconds": stat.ticks / os.sysconf("SC_CLK_TCK"),
        "threads": stat.threads,
        "rss_mib": int(re.search(r"^VmRSS:\s+(\d+)", status, re.M)[1]) / 1024,
        "descriptors": len(os.listdir(f"/proc/{pid}/fd")),
    }


def write_once(port: int, n: int) -> dict:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/api/v2/write?bucket=b", body=f"probe,host=w{n} v=1i 1".encode())
        response = conn.getresponse()
        response.read()
        status: int | str = response.status
    except Exception as error:  # the point: a writer locked out
        status = type(error).__name__
    finally:
        conn.close()
    return {"status": status, "seconds": round(time.monotonic() - started, 3)}


def answers(sockets: list[socket.socket]) -> dict[socket.socket, bytes]:
    got = {}
    poller = select.poll()
    by_fd = {}
    for sock in sockets:
        poller.register(sock, select.POLLIN)
        by_fd[sock.fileno()] = sock
    for fd, _ in poller.poll(0):
        try:
            got[by_fd[fd]] = by_fd[fd].recv(65536)
        except (ConnectionError, BlockingIOError):
            got[by_fd[fd]] = b""
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=HERE.parent.parent)
    parser.add_argument("--nofile", type=int, default=None)
    parser.add_argument("--silent", type=int, default=1000)
    parser.add_argument("--trickle", type=int, default=1000)
    parser.add_argument("--seconds-per-byte", type=float, default=1.0)
    parser.add_argument("--settle-seconds", type=float, default=3.0)
    parser.add_argument("--measure-seconds", type=float, default=5.0)
    parser.add_argument("--writes", type=int, default=5)
    parser.add_argument("--serve-arg", action="append", default=[], help="more serve options")
    parser.add_argument("--label", default="run")
    parser.add_argument("--results", type=Path, default=HERE / "results")
    args = parser.parse_args()

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = Path(tempfile.mkdtemp(prefix="slow-conns-"))
    log_path = work / "serve.log"

    def limit() -> None:
        if args.nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))

    env = dict(os.environ, PYTHONPATH=str(args.repo.resolve()), EPOCHSCOPE_LOG_LEVEL="INFO")
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "collector", "serve", "--db", str(work / "c.sqlite")),
                *("--listen", "127.0.0.1:0", *args.serve_arg),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=args.repo,
            preexec_fn=limit,
        )
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            match = re.search(r"listening on http://[\d.]+:(\d+)", log_path.read_text())
            port = int(match[1]) if match else None
            time.sleep(0.05)
        assert port, log_path.read_text()
        idle = proc_numbers(server.pid)
        silent: list[socket.socket] = []
        slow: list[socket.socket] = []
        connect_failures = 0
        opened_at = time.monotonic()
        for n in range(args.silent + args.trickle):
            want_slow = (n % 2 == 1 and len(slow) < args.trickle) or len(silent) >= args.silent
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                connect_failures += 1
                continue
            sock.setblocking(False)
            (slow if want_slow else silent).append(sock)
        open_seconds = time.monotonic() - opened_at
        got: dict[socket.socket, bytes] = {}
        stopping = threading.Event()

        def trickle() -> None:
            sent = dict.fromkeys(slow, 0)
            while not stopping.is_set():
                started = time.monotonic()
                for sock, data in answers(list(sent)).items():
                    got[sock] = data
                    del sent[sock]
                for sock, offset in list(sent.items()):
                    try:
                        sock.send(HEAD[offset : offset + 1])
                        sent[sock] = offset + 1
                    except (BlockingIOError, ConnectionError):
                        pass
                stopping.wait(max(0.0, args.seconds_per_byte - (time.monotonic() - started)))

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        time.sleep(args.settle_seconds)
        before = proc_numbers(server.pid)
        time.sleep(args.measure_seconds)
        after = proc_numbers(server.pid)
        writes = [write_once(port, n) for n in range(args.writes)]
        time.sleep(1.0)
        stopping.set()
        trickler.join(10)
        silent_closed = sum(1 for data in answers(silent).values() if data == b"")
        statuses: dict[str, int] = {}
        for data in got.values():
            key = data.split(b"\r\n", 1)[0].decode("latin-1") or "closed"
            statuses[key] = statuses.get(key, 0) + 1
        log_text = log_path.read_text(errors="replace")
        result = {
            "label": args.label,
            "repo": str(args.repo),
            "nofile": args.nofile or hard,
            "serve_args": args.serve_arg,
            "silent": len(silent),
            "trickle": len(slow),
            "connect_failures": connect_failures,
            "open_seconds": round(open_seconds, 2),
            "idle": idle,
            "held": after,
            "cpu_share_while_held": round(
                (after["cpu_seconds"] - before["cpu_seconds"]) / args.measure_seconds, 3
            ),
            "writes": writes,
            "slow_answers": statuses,
            "silent_closed_by_server": silent_closed,
            "log_lines": log_text.count("\n"),
            "tracebacks": log_text.count("Traceback"),
            "load_average": os.getloadavg(),
        }
        for sock in silent + slow:
            sock.close()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"slow-connections-{args.label}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
