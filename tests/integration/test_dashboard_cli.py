"""``dashboard serve``: where it may listen, HTTP basic auth, clear errors, read-only routes.

Servers run as real subprocesses (``python -m dashboard serve``) on 127.0.0.1 and are asked
over HTTP; nothing here binds beyond loopback (the refusals happen before any bind).
"""

from __future__ import annotations

import base64
import importlib.util
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from dashboard.auth import AuthError, Credentials, check_bind, is_loopback, parse_credentials

HAVE_STORE = importlib.util.find_spec("collector.store") is not None
needs_store = pytest.mark.skipif(not HAVE_STORE, reason="the SQLite store is not in this tree")
LISTENING = re.compile(r"dashboard on http://127\.0\.0\.1:(\d+)/")


def run_cli(
    args: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dashboard", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def empty_db(tmp_path) -> Path:
    from collector.store import SqliteStore

    path = tmp_path / "epochscope.sqlite"
    SqliteStore(path).close()
    return path


@contextmanager
def serving(args: list[str], env: dict[str, str], exit_codes: list[int] | None = None):
    """A ``dashboard serve`` subprocess on a free loopback port; yields (base URL, stderr
    lines so far). Stopped with SIGTERM; its exit code goes to ``exit_codes``."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dashboard", "serve", "--port", "0", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    port: list[str] = []
    ready = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            found = LISTENING.search(line)
            if found:
                port.append(found.group(1))
                ready.set()
        ready.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        ready.wait(60)
        if not port:
            status = process.poll()
            pytest.fail(f"dashboard did not start (exit status {status}): {''.join(lines)}")
        yield f"http://127.0.0.1:{port[0]}", lines
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=5)
        if exit_codes is not None:
            exit_codes.append(process.returncode)


def get(url: str, user: str | None = None, password: str | None = None):
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


# --------------------------------------------------------------------------------------
# where it may listen
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.9", "::1", "[::1]", "localhost"])
def test_loopback_needs_no_credentials(host):
    assert is_loopback(host)
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "192.168.0.7", "head-node"])
def test_anything_else_needs_credentials(host):
    assert not is_loopback(host)
    with pytest.raises(AuthError, match="--auth"):
        check_bind(host, None)
    check_bind(host, Credentials("alice", "s3cret"))


def test_serve_refuses_0_0_0_0_without_auth(repo_env, tmp_path):
    result = run_cli(["serve", "--db", str(tmp_path / "x.sqlite"), "--host", "0.0.0.0"], repo_env)
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0" in result.stderr
    assert "--auth USER:PASSWORD" in result.stderr


@pytest.mark.parametrize("bad", ["alice", ":s3cret", "alice:"])
def test_malformed_auth_is_refused(repo_env, tmp_path, bad):
    result = run_cli(["serve", "--db", str(tmp_path / "x.sqlite"), "--auth", bad], repo_env)
    assert result.returncode == 2
    assert "--auth must be USER:PASSWORD" in result.stderr


def test_credentials_keep_colons_in_the_password_and_out_of_repr():
    credentials = parse_credentials("alice:pa:ss")
    assert (credentials.user, credentials.password) == ("alice", "pa:ss")
    assert "pa:ss" not in repr(credentials)


def test_missing_store_is_a_clear_error(repo_env, tmp_path):
    missing = tmp_path / "nowhere.sqlite"
    result = run_cli(["serve", "--db", str(missing)], repo_env)
    assert result.returncode == 1
    assert f"no store at {missing}" in result.stderr
    assert not missing.exists()  # never creates an empty store by mistake


@needs_store
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "is empty (0 bytes), not a store"),
        (b"not an SQLite file at all" * 40, "is not a readable store (file is not a database)"),
    ],
)
@pytest.mark.parametrize("backend", [None, "victoriametrics=http://127.0.0.1:9"])
def test_a_damaged_or_empty_store_is_one_line(repo_env, tmp_path, content, says, backend):
    db = tmp_path / "bad.sqlite"
    db.write_bytes(content)
    extra = ["--backend", backend] if backend else []
    result = run_cli(["serve", "--db", str(db), *extra], repo_env)
    assert result.returncode == 2
    assert result.stderr.strip() == f"dashboard: error: {db} {says}" + (
        ": restore it from a backup, or delete it to start a new store"
        if not content
        else ": restore it from a backup, or move it aside to start a new store"
    )
    assert db.read_bytes() == content


@needs_store
def test_backend_and_collector_must_be_urls(repo_env, empty_db):
    result = run_cli(["serve", "--db", str(empty_db), "--backend", "127.0.0.1:8428"], repo_env)
    assert result.returncode == 2
    assert "--backend must be victoriametrics=URL or prometheus=URL" in result.stderr
    result = run_cli(["serve", "--collector", "127.0.0.1:8428"], repo_env)
    assert result.returncode == 2
    assert "--collector must be an http(s) URL" in result.stderr


def test_backend_needs_the_events_file(repo_env, tmp_path):
    missing = tmp_path / "events.sqlite"
    result = run_cli(
        ["serve", "--backend", "victoriametrics=http://127.0.0.1:8428", "--db", str(missing)],
        repo_env,
    )
    assert result.returncode == 1
    assert f"no store at {missing}" in result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--collector", "victoriametrics=http://127.0.0.1:8428", "--db", "x.sqlite"],
        ["--collector", "prometheus=http://127.0.0.1:9090"],
        ["--collector", "http://127.0.0.1:8428", "--db", "x.sqlite"],  # VictoriaMetrics, before
    ],
)
def test_old_backend_scripts_are_told_the_new_flag(repo_env, argv):
    """`--collector` was the PromQL backend; now it is a remote collector (as for `collector
    report`): an old script fails at once with the flag that means what it meant."""
    result = run_cli(["serve", *argv], repo_env)
    assert result.returncode == 2
    assert "--backend victoriametrics=http://127.0.0.1:8428" in result.stderr or (
        "--backend prometheus=http://127.0.0.1:9090" in result.stderr
    ), result.stderr
    assert "read API" in result.stderr


def test_a_bare_url_that_is_no_collector_names_the_backend_flag(repo_env):
    """`--collector http://VM` alone (a VictoriaMetrics URL in an old script) is asked as a
    collector; what answers there without a read API is told apart, with the new flag."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        result = run_cli(["serve", "--collector", url, "--port", "0"], repo_env)
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 1
    assert "has no read API" in result.stderr
    assert f"--backend victoriametrics={url}" in result.stderr


# --------------------------------------------------------------------------------------
# a real server
# --------------------------------------------------------------------------------------


@needs_store
def test_basic_auth_guards_every_route(repo_env, empty_db):
    with serving(["--db", str(empty_db), "--auth", "alice:s3:cret"], repo_env) as (url, lines):
        for path in ("/", "/_dash-layout", "/_dash-dependencies", "/assets/style.css"):
            status, headers, _ = get(url + path)
            assert status == 401, path
            assert headers["WWW-Authenticate"].startswith('Basic realm="epochscope"')
        assert get(url + "/", "alice", "wrong")[0] == 401
        assert get(url + "/", "bob", "s3:cret")[0] == 401
        status, _, body = get(url + "/", "alice", "s3:cret")
        assert status == 200
        assert "<title>epochscope</title>" in body
        assert get(url + "/_dash-layout", "alice", "s3:cret")[0] == 200
        assert "basic auth as alice" in "".join(lines)
    assert "s3:cret" not in "".join(lines)  # the password is never logged


@needs_store
def test_auth_from_the_environment(repo_env, empty_db):
    env = {**repo_env, "EPOCHSCOPE_DASHBOARD_AUTH": "carol:hunter2"}
    with serving(["--db", str(empty_db)], env) as (url, _lines):
        assert get(url + "/")[0] == 401
        assert get(url + "/", "carol", "hunter2")[0] == 200


@needs_store
def test_loopback_without_auth_serves_the_page(repo_env, empty_db):
    with serving(["--db", str(empty_db)], repo_env) as (url, _lines):
        status, _, body = get(url + "/")
        assert status == 200
        assert "<title>epochscope</title>" in body
        # the layout and scripts come from this server: nothing from a CDN
        assert "cdn" not in body.lower()
        assert "https://" not in body


@needs_store
def test_the_app_has_no_write_routes(empty_db):
    from collector.store import SqliteStore
    from dashboard.app import create_app
    from dashboard.source import DataSource

    app = create_app(DataSource(SqliteStore(empty_db)))
    writing = {
        rule.rule
        for rule in app.server.url_map.iter_rules()
        if rule.methods and rule.methods & {"POST", "PUT", "PATCH", "DELETE"}
    }
    # Dash's callback endpoint only: it computes outputs for the page and writes nothing
    assert writing == {"/_dash-update-component"}


@needs_store
def test_serve_stops_cleanly_on_sigterm(repo_env, empty_db):
    exit_codes: list[int] = []
    with serving(["--db", str(empty_db)], repo_env, exit_codes) as (url, _lines):
        assert get(url + "/")[0] == 200
    assert exit_codes == [0]


@pytest.mark.parametrize(
    "flags", [["--max-connections", "0"], ["--header-timeout", "0"], ["--header-timeout", "nan"]]
)
def test_connection_limits_must_be_positive(repo_env, tmp_path, flags):
    result = run_cli(["serve", "--db", str(tmp_path / "none.sqlite"), *flags], repo_env)
    assert result.returncode == 2
    assert "--max-connections must be at least 1 and --header-timeout > 0" in result.stderr


@needs_store
def test_header_timeout_cuts_a_head_sent_a_byte_at_a_time(repo_env, empty_db):
    """The flags reach the server (its behaviour is tested in test_dashboard_server.py)."""
    from tests.support.slow_clients import trickle_head

    with serving(["--db", str(empty_db), "--header-timeout", "3"], repo_env) as (url, lines):
        reply, seconds = trickle_head(int(url.rsplit(":", 1)[1]), 0.5)
        assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and 2.9 <= seconds < 60
        assert get(url + "/")[0] == 200
    refused = [line for line in lines if "refused" in line]
    assert len(refused) == 1 and "408 request head not received in time" in refused[0]
    assert "Traceback" not in "".join(lines)
