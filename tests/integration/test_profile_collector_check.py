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


FAKE_AGENT = """
import http.server, sys
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture
def agent_pushing_elsewhere(tmp_path):
    """A process that is, to `workloads profile`, the node's agent: `... agent run --config
    FILE` listening on its metrics port, its config pushing to another collector."""
    import subprocess

    config = tmp_path / "agent.toml"
    config.write_text('[push]\nurl = "http://127.0.0.1:9"\n')
    agent = subprocess.Popen([sys.executable, "-c", FAKE_AGENT, "agent", "run", "--config",
                              str(config)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield int(agent.stdout.readline()), config
    finally:
        agent.kill()
        agent.wait()


@pytest.fixture
def taking_collector():
    """A loopback collector that takes every write and whose node-samples question says a
    host's samples never reach its run_end: a report that waits for them waits its whole
    --samples-wait. The paths asked are kept; ``reads["status"]`` answers every read."""
    import json

    asked: list[str] = []
    reads = {"status": 200}  # a test sets 403: the token writes and may not read

    class Take(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(204)
            self.end_headers()

        def do_GET(self):
            asked.append(self.path.split("?")[0])
            if reads["status"] != 200:
                body = {
                    "code": "forbidden",
                    "message": "node:n1 is a node token: it writes "
                    "its host's samples only (the read API takes run and admin tokens)",
                }
            elif "node_samples" in self.path:
                body = {"node1": {"run_end_ns": 2, "latest_sample_ns": 1}}
            else:
                body = {"rows": [], "throughput": {}, "findings": []}
            data = json.dumps(body).encode()
            self.send_response(reads["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Take)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asked, reads
    server.shutdown()
    server.server_close()


def test_the_nodes_agent_pushing_elsewhere_is_said_and_not_waited_for(
    tmp_path, capsys, agent_pushing_elsewhere, taking_collector
):
    """Issue 45, item 1: before, `profile --collector URL` waited --samples-wait (15 s by
    default) for node samples the agent sent elsewhere, and said nothing."""
    port, config = agent_pushing_elsewhere
    url, asked, _ = taking_collector
    started = time.monotonic()
    code = main(["profile", "--collector", url, "--agent-port", str(port), "--samples-wait",
                 "30", "--runs-dir", str(tmp_path / "runs"), "--", sys.executable, "-c",
                 "pass"])  # fmt: skip
    seconds = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "pushes to http://127.0.0.1:9" in line]
    assert len(warnings) == 1, err  # said once, before the command runs
    assert warnings[0].startswith("workloads: warning: the agent on :")
    assert f'set [push] url = "{url}" in {config}' in warnings[0]
    assert warnings[0].endswith("the report will not wait for its samples")
    # never asked, and the --samples-wait not waited out (a bound on that, not on this
    # machine's speed: a loaded CI machine starts the command's Python slowly)
    assert seconds < 30 and not any("node_samples" in path for path in asked), (seconds, asked)


def test_with_no_agent_there_the_report_waits_for_the_samples(tmp_path, capsys, taking_collector):
    """The control: the same command, no agent on the port, asks for the node samples."""
    url, asked, _ = taking_collector
    code = main(["profile", "--collector", url, "--agent-port", str(closed_port()),
                 "--samples-wait", "1", "--runs-dir", str(tmp_path / "runs"), "--",
                 sys.executable, "-c", "pass"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert any("node_samples" in path for path in asked), asked
    assert "pushes to" not in capsys.readouterr().err


def test_a_token_that_writes_and_may_not_read_is_not_offered_again(
    tmp_path, capsys, taking_collector
):
    """An agent's node token takes the run's events and is refused the report (403): the
    'later' command does not name the same token file, which would be refused again."""
    url, _, reads = taking_collector
    reads["status"] = 403
    token_file = tmp_path / "node-token"
    token_file.write_text("node-token-of-n1\n")
    token_file.chmod(0o600)
    code = main(["profile", "--collector", url, "--token-file", str(token_file),
                 "--agent-port", str(closed_port()), "--runs-dir", str(tmp_path / "runs"),
                 "--", sys.executable, "-c", "pass"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    (line,) = [line for line in err.splitlines() if "no per-epoch table" in line]
    assert "is a node token" in line
    later = line.split("; later: ", 1)[1]
    assert later.startswith("collector report profile-") and str(token_file) not in later
    assert later.endswith("--token-file FILE, FILE holding a run or admin token")
