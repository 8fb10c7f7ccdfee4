"""``collector serve --workers N``: bodies parsed in worker processes, stored by the server.

Real ``collector serve`` processes on loopback, real SQLite files, real worker processes
(killed with a real SIGKILL). The same bodies, sent in the same order to ``--workers 1``
and ``--workers 2``, must get the same answers (malformed lines named by their line
number, the rest stored) and leave the same samples and events; each 204 must come only
once its points can be read back; a worker killed under the server is replaced and no
acknowledged point is lost.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import psutil

from collector.store import SqliteStore
from tests.integration.test_collector_ingest_server import S, start_server
from tests.support.services import wait_until

FIELDS = ("user_seconds", "idle_seconds", "util_percent")
T0 = 1_700_000_000 * S


def node_body(node: int, tick: int, lines: int = 40) -> bytes:
    """A node's batch: ``lines`` GPU lines (well over the pool's 2 KiB), integers and
    floats, one timestamp per tick."""
    rows = []
    for gpu in range(lines):
        rows.append(
            f"gpu,host=node{node:03d},gpu={gpu},name=A100\\ SXM user_seconds={tick * 7 + gpu}i,"
            f"idle_seconds={tick * 0.5 + gpu / 8},util_percent={(gpu * 13 + tick) % 101}.25 "
            f"{T0 + tick * S}"
        )
    return ("\n".join(rows) + "\n").encode()


def with_malformed(body: bytes) -> bytes:
    """``body`` with line 3 not a value and line 7 without fields (400, rest stored)."""
    lines = body.decode().splitlines()
    lines[2] = lines[2].replace("util_percent=", "util_percent=oops")
    lines[6] = lines[6].split(" ")[0] + " " + lines[6].rsplit(" ", 1)[1]
    return ("\n".join(lines) + "\n").encode()


def event_body(run_id: str, step: int) -> bytes:
    return (
        f'workload,run_id={run_id},host=node000,rank=0,framework=pytorch event="step",'
        f"images=256i,seconds=0.5,epoch=0i,step={step}i {T0 + step * S}\n"
    ).encode()


def bodies() -> list[bytes]:
    sent = [node_body(node, tick) for tick in range(3) for node in range(6)]
    sent.insert(5, with_malformed(node_body(10, 0)))
    sent.insert(9, event_body("run-a", 1))
    sent.append(event_body("run-a", 2))
    # one body of events and samples together, large enough for a worker
    sent.append(node_body(11, 0) + event_body("run-a", 3))
    return sent


def everything(db: Path) -> dict:
    with SqliteStore(db) as store:
        samples = {}
        for field in FIELDS:
            for data in store.read_series(store.list_series("gpu", field), -(2**62), 2**62):
                key = (field, data.info.host, tuple(sorted(data.info.tags.items())))
                samples[key] = (data.times_ns.tolist(), data.values.tolist())
        events = [(e.time_ns, e.event, dict(e.fields)) for e in store.events("run-a")]
    return {"samples": samples, "events": events}


def points_of(db: Path, host: str) -> int:
    with SqliteStore(db) as store:
        series = store.list_series("gpu", "user_seconds", host)
        return sum(len(d.times_ns) for d in store.read_series(series, -(2**62), 2**62))


def parse_workers(server_pid: int) -> list[psutil.Process]:
    """The server's parse workers: the forkserver's children (the collector's
    grandchildren)."""
    found = []
    for child in psutil.Process(server_pid).children():
        found += child.children()
    return found


def test_two_workers_store_and_answer_exactly_what_one_does(tmp_path, repo_env):
    answers: dict[int, list[tuple[int, str]]] = {}
    stores: dict[int, dict] = {}
    for workers in (1, 2):
        where = tmp_path / f"w{workers}"
        where.mkdir()
        server = start_server(where, repo_env, "--workers", str(workers))
        try:
            if workers == 2:
                pid = server.process.pid
                wait_until(
                    lambda: len(parse_workers(pid)) == 2,  # noqa: B023 (called here only)
                    "2 parse workers",
                    server.process,
                    server.log,
                    60,
                )
            answers[workers] = []
            for body in bodies():
                status, _, reply = server.request("POST", "/api/v2/write?bucket=b", body)
                answers[workers].append((status, reply.decode()))
                if status == 204 and body.startswith(b"gpu,"):
                    # answered only once stored: readable by another connection right now
                    host = body.split(b",", 2)[1].split(b"=")[1].decode()
                    assert points_of(server.db, host) > 0
        finally:
            server.stop()
        stores[workers] = everything(server.db)
    assert answers[2] == answers[1]
    statuses = [status for status, _ in answers[1]]
    assert statuses.count(400) == 1 and set(statuses) == {204, 400}
    (malformed,) = [reply for status, reply in answers[1] if status == 400]
    assert "line 3" in malformed and "line 7" in malformed
    assert "38 points written" in malformed  # 40 lines, 2 rejected, the rest stored
    assert stores[2] == stores[1]
    assert len(stores[1]["events"]) == 3
    # 6 nodes + node010 + node011, 40 GPUs each; node010's lines 3 and 7 not stored
    assert len(stores[1]["samples"]) == len(FIELDS) * (40 * 8 - 2)


def test_a_killed_worker_is_replaced_and_nothing_acknowledged_is_lost(tmp_path, repo_env):
    server = start_server(tmp_path, repo_env, "--workers", "2")
    try:

        def two_workers() -> bool:
            return len(parse_workers(server.process.pid)) == 2

        wait_until(two_workers, "2 parse workers", server.process, server.log, 60)
        killed = parse_workers(server.process.pid)[0]
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)

        acknowledged: list[int] = []
        failures: list[int] = []

        def send(node: int) -> None:
            for tick in range(5):
                status, _, _ = server.request(
                    "POST", "/api/v2/write?bucket=b", node_body(node, tick)
                )
                (acknowledged if status == 204 else failures).append(node)

        threads = [threading.Thread(target=send, args=(node,)) for node in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == []
        assert len(acknowledged) == 20
        for node in range(4):
            assert points_of(server.db, f"node{node:03d}") == 5 * 40
        # the dead worker was found by a request and a new one started in its place
        wait_until(two_workers, "a new parse worker", server.process, server.log, 30)
        assert killed.pid not in {w.pid for w in parse_workers(server.process.pid)}
        deadline = time.monotonic() + 10
        while "parse worker" not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "died" in server.log.read_text()
    finally:
        server.stop()
