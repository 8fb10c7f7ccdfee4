"""A TLS collector at its connection cap, flooded with sockets that never start their
handshake and are opened again as soon as they are closed (issue 44, item 2: at a cap of
1,000, 1,010 such sockets failed 12 of 14 writes over 26 s).

    python bench/reliability/handshake_flood.py [--cap 1000] [--sockets 1010] [--seconds 26]
    python bench/reliability/handshake_flood.py --tree /tmp/before   # another checkout

Starts ``collector serve`` over TLS (a throw-away CA, a token, ``--max-connections CAP``),
opens ``--sockets`` silent TCP connections to it and, for ``--seconds``, reopens each one
the server closes; meanwhile a writer with the CA and the token writes one line every
``--seconds`` / ``--writes`` seconds over a new TLS connection (10 s timeout, as the
agent's). Prints each write's status and time, how many silent sockets the server closed
(to make room), and the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from bench.ingest.run import free_port  # noqa: E402
from tests.support.tls_certs import TestCa  # noqa: E402

TOKEN = "bench-handshake-flood-token"


def write(port: int, context: ssl.SSLContext) -> tuple[str, float]:
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/api/v2/write?bucket=b&org=o",
        data=b"flood_probe value=1 1700000000000000000\n",
        headers={"Authorization": f"Token {TOKEN}"},
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            status = str(reply.status)
    except urllib.error.HTTPError as error:
        status = str(error.code)
    except urllib.error.URLError as error:
        status = f"failed: {error.reason}"[:60]
    except (OSError, ssl.SSLError) as error:
        status = f"failed: {error}"[:60]
    return status, time.perf_counter() - started


class Flood:
    """``count`` silent sockets, each reopened when the server closes it."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.selector = selectors.DefaultSelector()
        self.closed_by_server = 0
        self.stop = threading.Event()
        for _ in range(count):
            self._open()

    def _open(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            return
        sock.setblocking(False)
        stale = self.selector.get_map().get(sock.fileno())
        if stale is not None:  # a socket closed in this pass left its descriptor number
            self.selector.unregister(stale.fileobj)
        self.selector.register(sock, selectors.EVENT_READ)

    def run(self) -> None:
        while not self.stop.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                sock = key.fileobj
                if sock.fileno() < 0:  # type: ignore[union-attr]  # closed earlier this pass
                    continue
                try:
                    data = sock.recv(4096)  # type: ignore[union-attr]
                except OSError:
                    data = b""
                if not data:
                    self.selector.unregister(sock)
                    sock.close()  # type: ignore[union-attr]
                    self.closed_by_server += 1
                    self._open()

    def close(self) -> None:
        self.stop.set()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=1000)
    parser.add_argument("--sockets", type=int, default=1010)
    parser.add_argument("--seconds", type=float, default=26.0)
    parser.add_argument("--writes", type=int, default=14)
    parser.add_argument("--tree", type=Path, default=REPO_ROOT, help="the checkout to run")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as workdir:
        root = Path(workdir)
        ca = TestCa(root / "ca", "flood CA")
        server = ca.issue("server")
        token_file = root / "token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(args.tree.resolve()), EPOCHSCOPE_LOG_LEVEL="WARNING")
        collector = subprocess.Popen(
            [sys.executable, "-m", "collector", "serve", "--db", str(root / "s.sqlite"),
             "--listen", f"127.0.0.1:{port}", "--token-file", str(token_file),
             "--tls-cert-file", str(server.cert_file), "--tls-key-file", str(server.key_file),
             "--max-connections", str(args.cap), "--header-timeout", "60"],
            env=env, cwd=args.tree.resolve(), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        context = ssl.create_default_context(cafile=str(ca.ca_file))
        try:
            deadline = time.monotonic() + 60
            while write(port, context)[0] != "204":
                if time.monotonic() > deadline:
                    raise SystemExit("the collector did not answer a write in 60 s")
                time.sleep(0.5)
            print(
                f"tree {args.tree}; cap {args.cap}, {args.sockets} silent sockets reopened "
                f"for {args.seconds:g} s, {args.writes} writes; {os.cpu_count()} CPUs; "
                f"load {os.getloadavg()[0]:.2f}"
            )
            flood = Flood(port, args.sockets)
            flooding = threading.Thread(target=flood.run, daemon=True)
            flooding.start()
            time.sleep(1.0)  # all accepted, each waiting in its handshake
            results = []
            started = time.monotonic()
            for number in range(args.writes):
                wait = started + number * args.seconds / args.writes - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                results.append(write(port, context))
            flood.close()
            flooding.join(5)
            served = sum(status == "204" for status, _ in results)
            for status, took in results:
                print(f"  write: {status:<60} {took:6.2f} s")
            print(
                f"{served} of {len(results)} writes 204; slowest "
                f"{max(took for _, took in results):.2f} s; silent sockets closed by the "
                f"server {flood.closed_by_server}; load {os.getloadavg()[0]:.2f}"
            )
        finally:
            collector.terminate()
            collector.wait(timeout=60)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return 0


if __name__ == "__main__":
    sys.exit(main())
