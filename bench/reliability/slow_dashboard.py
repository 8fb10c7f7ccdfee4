"""Idle and slow connections against one ``dashboard serve``: are pages still served, and
how many threads do the slow ones hold?

    python bench/reliability/slow_dashboard.py --silent 500 --trickle 500 --label after
    python bench/reliability/slow_dashboard.py --repo OLD_CHECKOUT --label before

Starts the dashboard of ``--repo`` (default this checkout) over an empty store on loopback,
opens ``--silent`` connections that send nothing and ``--trickle`` connections that send a
request head a byte every ``--seconds-per-byte`` without ever finishing it (interleaved),
waits ``--settle-seconds``, measures the server (threads, RSS, descriptors, CPU) for
``--measure-seconds``, loads the page ``--pages`` times (each on a new connection, 30 s
timeout), then waits until ``--hold-seconds`` after the connections opened and counts what
the slow ones got back (408, 503, closed, nothing). Writes JSON to ``results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from slow_connections import answers, proc_numbers  # noqa: E402

HEAD = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
URL: list[str] = []  # the server's base URL, once it listens


def page_once() -> dict:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(URL[0] + "/", timeout=30) as response:
            status: int | str = response.status
            response.read()
    except Exception as error:  # the point: a reader locked out
        status = type(error).__name__
    return {"status": status, "seconds": round(time.monotonic() - started, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=HERE.parent.parent)
    parser.add_argument("--silent", type=int, default=500)
    parser.add_argument("--trickle", type=int, default=500)
    parser.add_argument("--seconds-per-byte", type=float, default=1.0)
    parser.add_argument("--settle-seconds", type=float, default=3.0)
    parser.add_argument("--measure-seconds", type=float, default=3.0)
    parser.add_argument("--hold-seconds", type=float, default=14.0)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--serve-arg", action="append", default=[], help="more serve options")
    parser.add_argument("--label", default="run")
    parser.add_argument("--results", type=Path, default=HERE / "results")
    args = parser.parse_args()

    from collector.store import SqliteStore

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = Path(tempfile.mkdtemp(prefix="slow-dashboard-"))
    SqliteStore(work / "e.sqlite").close()
    log_path = work / "serve.log"
    env = dict(os.environ, PYTHONPATH=str(args.repo.resolve()))
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "dashboard", "serve", "--db", str(work / "e.sqlite")),
                *("--port", "0", "--prepare-runs", "0", *args.serve_arg),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=args.repo,
        )
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            match = re.search(r"dashboard on http://127\.0\.0\.1:(\d+)/", log_path.read_text())
            port = int(match[1]) if match else None
            time.sleep(0.1)
        assert port, log_path.read_text()
        URL.append(f"http://127.0.0.1:{port}")
        first_page = page_once()
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
        silent_got: dict[socket.socket, bytes] = {}
        stopping = threading.Event()

        def trickle() -> None:
            sent = dict.fromkeys(slow, 0)
            waiting = set(silent)
            while not stopping.is_set():
                started = time.monotonic()
                for sock, data in answers(list(sent)).items():
                    got[sock] = data
                    del sent[sock]
                for sock, data in answers(list(waiting)).items():
                    silent_got[sock] = data
                    waiting.discard(sock)
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
        held = proc_numbers(server.pid)
        pages = [page_once() for _ in range(args.pages)]
        time.sleep(max(0.0, args.hold_seconds - (time.monotonic() - opened_at)))
        at_hold = proc_numbers(server.pid)
        stopping.set()
        trickler.join(10)
        statuses: dict[str, int] = {}
        for data in got.values():
            key = data.split(b"\r\n", 1)[0].decode("latin-1") or "closed"
            statuses[key] = statuses.get(key, 0) + 1
        log_text = log_path.read_text(errors="replace")
        result = {
            "label": args.label,
            "repo": str(args.repo),
            "serve_args": args.serve_arg,
            "silent": len(silent),
            "trickle": len(slow),
            "connect_failures": connect_failures,
            "open_seconds": round(open_seconds, 2),
            "first_page": first_page,
            "idle": idle,
            "held": held,
            "cpu_share_while_held": round(
                (held["cpu_seconds"] - before["cpu_seconds"]) / args.measure_seconds, 3
            ),
            "pages": pages,
            "hold_seconds": args.hold_seconds,
            "at_hold": at_hold,
            "trickle_answers_by_hold": statuses,
            "trickle_unanswered_at_hold": len(slow) - len(got),
            "silent_closed_by_hold": sum(1 for data in silent_got.values() if data == b""),
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
    out = args.results / f"slow-dashboard-{args.label}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
