"""`workloads profile --collector URL` checks the collector and the token before the command
runs (issue 45, item 1): a collector that is down, or one that refuses the token, stops it
in seconds with one line (before: a 3-s script took 1 min 05 s and exited 0)."""

from __future__ import annotations

import http.server
import socket
import sys
import threading
import time

import pytest

from workloads.cli import main


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def refusing_collector():
    """A loopback HTTP server answering every write 401, as `collector serve --token-file`
    answers a wrong token."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def profile(tmp_path, url: str, *more: str) -> tuple[int, float]:
    marker = tmp_path / "ran"
    started = time.monotonic()
    code = main(["profile", "--collector", url, "--runs-dir", str(tmp_path / "runs"), *more,
                 "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])  # fmt: skip
    assert not marker.exists()  # the command never ran
    return code, time.monotonic() - started


def test_a_collector_that_is_down_stops_it_up_front(tmp_path, capsys):
    code, seconds = profile(tmp_path, f"http://127.0.0.1:{closed_port()}")
    assert code == 2 and seconds < 10
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("workloads: ") and "127.0.0.1" in line


def test_a_refused_token_names_its_file(tmp_path, capsys, refusing_collector):
    token_file = tmp_path / "token"
    token_file.write_text("not-the-token\n")
    token_file.chmod(0o600)
    code, seconds = profile(tmp_path, refusing_collector, "--token-file", str(token_file))
    assert code == 2 and seconds < 10
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"refused the token from --token-file {token_file}" in line
