"""The event store: workload events, the runs they make, and their steps, in the store's
SQLite file (tables ``events``, ``runs``, ``run_hosts``: see ``collector.store.database``).

``collector serve`` writes events here whatever holds the samples; the SQLite store and the
VictoriaMetrics and Prometheus stores read runs, events and steps from here.

Run state rules (:func:`run_info`): rank 0's ``run_start`` is the run's configuration. A run
was interrupted when a rank says so in its ``run_end`` (the user stopped it: Ctrl-C or
SIGTERM to ``workloads run``) and no rank failed before that; it failed if any rank says
so; it finished when rank 0 (or, without a rank 0, every rank that started) ended;
otherwise it is live.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading

import numpy as np

from collector.store.api import RunInfo, StepTable, WorkloadEvent, read_only
from collector.store.database import Database
from contract.point import Point
from contract.schema import Event, RunState, Tag, Workload

# who created each run (netserve.tokens.Identity.name): made by the first scoped write, so a
# file that never saw one stays readable by collectors before it
RUN_OWNERS_TABLE = (
    "CREATE TABLE IF NOT EXISTS run_owners (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL)"
)


class EventStore:
    """Runs, events and steps of one store file; the runs half of ``ReadStore``."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # run id -> (what its record is made of, the record): see runs()
        self._kept: dict[str, tuple[tuple, RunInfo]] = {}
        self._kept_lock = threading.Lock()

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> EventStore:
        """The events of the store file at ``path`` (created when missing)."""
        return cls(Database(path))

    def close(self) -> None:
        self.db.close()

    def claim_runs(
        self, conn: sqlite3.Connection, events: list[Point], writer: str, admin: bool
    ) -> tuple[list[Point], list[str]]:
        """In the caller's transaction: the events ``writer`` may write, and one line per
        run it may not. A run belongs to the identity that wrote its first event (stamped
        in ``run_owners``); an admin may write any run (claiming those nobody has)."""
        if not events:
            return events, []
        conn.execute(RUN_OWNERS_TABLE)
        run_ids = sorted({point.tags.get(Tag.RUN_ID, "") for point in events})
        owners: dict[str, str] = {}
        for start in range(0, len(run_ids), 500):
            chunk = run_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            owners.update(
                conn.execute(
                    f"SELECT run_id, owner FROM run_owners WHERE run_id IN ({marks})", chunk
                ).fetchall()
            )
        unclaimed = [run_id for run_id in run_ids if run_id not in owners]
        conn.executemany(
            "INSERT INTO run_owners (run_id, owner) VALUES (?, ?)",
            [(run_id, writer) for run_id in unclaimed],
        )
        owners.update((run_id, writer) for run_id in unclaimed)
        refused = {run_id for run_id, owner in owners.items() if owner != writer and not admin}
        if not refused:
            return events, []
        kept = [point for point in events if point.tags.get(Tag.RUN_ID, "") not in refused]
        counts: dict[str, int] = {}
        for point in events:
            run_id = point.tags.get(Tag.RUN_ID, "")
            if run_id in refused:
                counts[run_id] = counts.get(run_id, 0) + 1
        lines = [
            f"run {run_id!r} belongs to {owners[run_id]}, not {writer}: "
            f"its {count} event(s) refused"
            for run_id, count in sorted(counts.items())
        ]
        return kept, lines

    def owner(self, run_id: str) -> str | None:
        """The identity that created ``run_id`` (``collector serve`` stamps it), or None."""
        conn = self.db.read_conn()
        try:
            row = conn.execute(
                "SELECT owner FROM run_owners WHERE run_id = ?", (run_id,)
            ).fetchone()
        except sqlite3.OperationalError:  # a file no scoped write has reached
            return None
        return row[0] if row else None

    def insert(self, conn: sqlite3.Connection, events: list[Point]) -> None:
        """Add workload points in the caller's transaction (``Database.transaction``);
        re-sending one replaces it."""
        rows = []
        spans: dict[str, list] = {}  # run_id -> [framework, first, last]
        hosts: set[tuple[str, str]] = set()
        for point in events:
            tags = point.tags
            run_id = tags.get(Tag.RUN_ID, "")
            host = tags.get(Tag.HOST, "")
            framework = tags.get(Tag.FRAMEWORK, "")
            fields = dict(point.fields)
            event = str(fields.pop(Workload.EVENT, ""))
            rows.append(
                (
                    run_id,
                    point.time_ns,
                    host,
                    _rank(tags.get(Tag.RANK)),
                    event,
                    framework,
                    json.dumps(fields, separators=(",", ":")),
                )
            )
            span = spans.get(run_id)
            if span is None:
                spans[run_id] = [framework, point.time_ns, point.time_ns]
            else:
                span[0] = span[0] or framework
                span[1] = min(span[1], point.time_ns)
                span[2] = max(span[2], point.time_ns)
            hosts.add((run_id, host))
        conn.executemany(
            "INSERT OR REPLACE INTO events (run_id, time_ns, host, rank, event, framework,"
            " fields) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO runs (run_id, framework, first_ns, last_ns) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (run_id) DO UPDATE SET"
            " framework = CASE WHEN framework = '' THEN excluded.framework ELSE framework END,"
            " first_ns = min(first_ns, excluded.first_ns),"
            " last_ns = max(last_ns, excluded.last_ns)",
            [(run_id, *span) for run_id, span in spans.items()],
        )
        conn.executemany("INSERT OR IGNORE INTO run_hosts (run_id, host) VALUES (?, ?)", hosts)

    def hosts(self) -> list[str]:
        """The hosts that ran a run."""
        rows = self.db.read_conn().execute("SELECT DISTINCT host FROM run_hosts ORDER BY 1")
        return [host for (host,) in rows if host]

    def runs(self) -> list[RunInfo]:
        """Every run, newest first. A run's record is rebuilt only when what it is made of
        changed (its span, hosts, framework or number of run_start/run_end events, counted
        from the index): decoding 40,000 such events took most of the runs table's time
        over 20,000 runs, on every request."""
        with self.db.read_snapshot() as conn:
            spans = conn.execute(
                "SELECT run_id, framework, first_ns, last_ns FROM runs WHERE run_id != ''"
            ).fetchall()
            hosts: dict[str, list[str]] = {}
            for run_id, host in conn.execute("SELECT run_id, host FROM run_hosts ORDER BY 1, 2"):
                hosts.setdefault(run_id, []).append(host)
            counts = dict(
                conn.execute(
                    "SELECT run_id, count(*) FROM events INDEXED BY events_by_kind"
                    " WHERE event IN (?, ?) GROUP BY run_id",
                    (Event.RUN_START, Event.RUN_END),
                ).fetchall()
            )
            keys = {
                run_id: (framework, first, last, tuple(hosts.get(run_id, [])), counts.get(run_id))
                for run_id, framework, first, last in spans
            }
            with self._kept_lock:
                stale = [
                    run_id
                    for run_id, key in keys.items()
                    if self._kept.get(run_id, ())[:1] != (key,)
                ]
            marks = self._marks(conn, stale, len(keys)) if stale else {}
        stale_ids = set(stale)
        fresh = {
            run_id: run_info(
                run_id, framework, first, last, hosts.get(run_id, []), marks.get(run_id, [])
            )
            for run_id, framework, first, last in spans
            if run_id in stale_ids
        }
        with self._kept_lock:
            for run_id, info in fresh.items():
                self._kept[run_id] = (keys[run_id], info)
            for gone in set(self._kept) - set(keys):
                del self._kept[gone]
            found = [self._kept[run_id][1] for run_id in keys]
        found.sort(key=lambda run: (run.start_ns, run.run_id), reverse=True)
        return found

    def _marks(
        self, conn: sqlite3.Connection, run_ids: list[str], runs: int
    ) -> dict[str, list[tuple]]:
        """The run_start and run_end events of ``run_ids`` (all of them in one pass when
        they are many of ``runs``), by run, in time order."""
        marks: dict[str, list[tuple]] = {}
        if len(run_ids) * 4 > runs:
            wanted = set(run_ids)
            rows = conn.execute(
                "SELECT run_id, event, time_ns, rank, fields FROM events"
                " WHERE event IN (?, ?) ORDER BY time_ns",
                (Event.RUN_START, Event.RUN_END),
            )
            for row in rows:
                if row[0] in wanted:
                    marks.setdefault(row[0], []).append(row[1:])
            return marks
        for run_id in run_ids:
            marks[run_id] = [
                tuple(row)
                for row in conn.execute(
                    "SELECT event, time_ns, rank, fields FROM events"
                    " WHERE run_id = ? AND event IN (?, ?) ORDER BY time_ns",
                    (run_id, Event.RUN_START, Event.RUN_END),
                )
            ]
        return marks

    def run(self, run_id: str) -> RunInfo | None:
        with self.db.read_snapshot() as conn:
            span = conn.execute(
                "SELECT run_id, framework, first_ns, last_ns FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if span is None or not run_id:
                return None
            hosts = [
                host
                for (host,) in conn.execute(
                    "SELECT host FROM run_hosts WHERE run_id = ? ORDER BY 1", (run_id,)
                )
            ]
            marks = conn.execute(
                "SELECT event, time_ns, rank, fields FROM events"
                " WHERE run_id = ? AND event IN (?, ?) ORDER BY time_ns",
                (run_id, Event.RUN_START, Event.RUN_END),
            ).fetchall()
        return run_info(*span, hosts, marks)

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        sql = (
            "SELECT run_id, host, rank, framework, event, time_ns, fields FROM events"
            " WHERE run_id = ?"
        )
        args: list = [run_id]
        if since_ns is not None:
            sql += " AND time_ns > ?"
            args.append(since_ns)
        if kinds is not None:
            # by (run, kind): a run's few epoch events without walking its many steps
            sql = sql.replace("FROM events", "FROM events INDEXED BY events_by_run_kind")
            sql += f" AND event IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        sql += " ORDER BY time_ns, rank, host"
        return [
            WorkloadEvent(run, host, rank, framework, event, time_ns, json.loads(fields))
            for run, host, rank, framework, event, time_ns, fields in self.db.read_conn().execute(
                sql, args
            )
        ]

    def events_of_runs(
        self, run_ids: list[str], kinds: tuple[str, ...]
    ) -> dict[str, list[WorkloadEvent]]:
        """The events of ``kinds`` of several runs in one query (the runs table's summaries
        of runs not summarised yet), by run, each in ``events()``'s order."""
        by_run: dict[str, list[WorkloadEvent]] = {run_id: [] for run_id in run_ids}
        if not run_ids:
            return by_run
        sql = (
            "SELECT run_id, host, rank, framework, event, time_ns, fields FROM events"
            " INDEXED BY events_by_run_kind"
            f" WHERE run_id IN ({','.join('?' * len(run_ids))})"
            f" AND event IN ({','.join('?' * len(kinds))})"
            " ORDER BY run_id, time_ns, rank, host"
        )
        for run, host, rank, framework, event, time_ns, fields in self.db.read_conn().execute(
            sql, [*run_ids, *kinds]
        ):
            by_run[run].append(
                WorkloadEvent(run, host, rank, framework, event, time_ns, json.loads(fields))
            )
        return by_run

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        """The run's steps as columns, picked out of the JSON by SQLite: no event is decoded
        in Python. Each host's steps come as one row of joined columns
        (``STEPS_BY_HOST_SQL``), parsed by numpy; where a step holds a value that is not a
        number (text, a bool) or the joined text is too long, row by row (``STEPS_SQL``)."""
        since = "" if since_ns is None else " AND time_ns > ?"
        args: list = [run_id, Event.STEP] + ([] if since_ns is None else [since_ns])
        conn = self.db.read_conn()
        try:
            try:
                table = _joined_steps(
                    conn.execute(STEPS_BY_HOST_SQL.format(since=since), args).fetchall()
                )
            except sqlite3.DataError:  # a host's joined text longer than SQLite allows
                table = None
            if table is not None:
                return table
            rows = conn.execute(STEPS_SQL.format(since=since), args).fetchall()
        except sqlite3.OperationalError as error:  # fields SQLite's JSON cannot read (NaN)
            if "JSON" not in str(error):
                raise
            return StepTable.from_events(self.events(run_id, since_ns, kinds=(Event.STEP,)))
        if not rows:
            return StepTable.empty()
        host, rank, time_ns, *numbers = zip(*rows, strict=True)
        return StepTable.from_columns(
            host, rank, time_ns, **dict(zip(StepTable.FIELDS, numbers, strict=True))
        )


def _joined_steps(by_host: list[tuple[str, str, str, str]]) -> StepTable | None:
    """A table from ``STEPS_BY_HOST_SQL``'s rows (a host; its steps' ranks and times joined
    by commas; their ``FIELDS`` as a JSON array of arrays), in ``steps()``'s order; None
    when a field holds something other than a number or null, which only the row-by-row
    query reads as ``StepTable`` defines (as NaN)."""
    if not by_host:
        return StepTable.empty()
    hosts, ranks, times, numbers = [], [], [], []
    for host, rank_text, time_text, fields_text in by_host:
        if '"' in fields_text or "true" in fields_text or "false" in fields_text:
            return None  # text or a bool among the values
        try:
            values = np.array(json.loads(fields_text.replace("null", "NaN")), dtype=np.float64)
            rank = np.array(rank_text.split(","), dtype=np.int64)
            time_ns = np.array(time_text.split(","), dtype=np.int64)
        except (ValueError, TypeError):  # an object or an array among the values
            return None
        if values.shape != (rank.size, len(StepTable.FIELDS)):
            return None
        hosts.append(host)
        ranks.append(rank)
        times.append(time_ns)
        numbers.append(values)
    host_index = np.concatenate([np.full(r.size, i, dtype=np.int64) for i, r in enumerate(ranks)])
    rank, time_ns = np.concatenate(ranks), np.concatenate(times)
    # steps()'s order: time, rank, then host (the hosts are sorted by the GROUP BY)
    order = np.lexsort((host_index, rank, time_ns))
    columns = np.concatenate(numbers)[order]
    return StepTable(
        hosts=tuple(hosts),
        host_index=read_only(host_index[order]),
        rank=read_only(rank[order]),
        time_ns=read_only(time_ns[order]),
        **{name: read_only(columns[:, i].copy()) for i, name in enumerate(StepTable.FIELDS)},
    )


def _json_number(name: str) -> str:
    """SQL for the field ``name`` of an event's JSON fields as a REAL, NULL unless it is a
    JSON number (``json_extract`` gives 1 for ``true`` and the text of a string)."""
    path = f"'$.\"{name}\"'"  # a quoted key: any name the schema spells
    return (
        f"CASE json_type(fields, {path}) WHEN 'integer' THEN json_extract(fields, {path}) * 1.0"
        f" WHEN 'real' THEN json_extract(fields, {path}) END"
    )


_WHERE_STEPS = " FROM events INDEXED BY events_by_run_kind WHERE run_id = ? AND event = ?{since}"
STEPS_SQL = (
    "SELECT host, rank, time_ns, "
    + ", ".join(_json_number(name) for name in StepTable.FIELDS.values())
    + _WHERE_STEPS
    + " ORDER BY time_ns, rank, host"
)
# json_extract with several paths gives their values' JSON text as an array, numbers as
# they were written (exact)
STEPS_BY_HOST_SQL = (
    "SELECT host, group_concat(rank), group_concat(time_ns), '[' || group_concat(json_extract("
    + "fields, "
    + ", ".join(f"'$.\"{name}\"'" for name in StepTable.FIELDS.values())
    + ")) || ']'"
    + _WHERE_STEPS
    + " GROUP BY host ORDER BY host"
)


def _rank(text: str | None) -> int:
    try:
        return int(text) if text is not None else -1
    except ValueError:
        return -1


def run_info(
    run_id: str,
    framework: str,
    first_ns: int,
    last_ns: int,
    hosts: list[str],
    marks: list[tuple[str, int, int, str]],
) -> RunInfo:
    """A run from its run_start and run_end events (``marks``: event, time, rank, fields).

    Rank 0's run_start is the configuration. The run was interrupted when a rank says so
    and no rank's failure came before the first such run_end (the ranks the stop took down
    with it may say failed: a rank on another host that never heard of the stop); it failed
    if any rank says so; it finished when rank 0 (or, without a rank 0, every rank that
    started) ended.
    """
    starts: dict[int, tuple[int, dict]] = {}
    ends: dict[int, tuple[int, dict]] = {}
    for event, time_ns, rank, fields in marks:
        if event in (Event.RUN_START, Event.RUN_END):
            (starts if event == Event.RUN_START else ends)[rank] = (time_ns, json.loads(fields))
    config: dict = {}
    if starts:
        config = starts[0][1] if 0 in starts else starts[min(starts)][1]
    start_ns = min((t for t, _ in starts.values()), default=first_ns)
    failed = [t for t, f in ends.values() if f.get(Workload.STATE) == RunState.FAILED]
    stopped = [t for t, f in ends.values() if f.get(Workload.STATE) == RunState.INTERRUPTED]
    if stopped and not any(t < min(stopped) for t in failed):
        state, end_ns = RunState.INTERRUPTED, max(t for t, _ in ends.values())
    elif failed:
        state, end_ns = RunState.FAILED, max(t for t, _ in ends.values())
    elif ends and (0 in ends or (starts and set(starts) <= set(ends))):
        state, end_ns = RunState.FINISHED, max(t for t, _ in ends.values())
    else:
        state, end_ns = RunState.LIVE, None
    world_size = config.get(Workload.WORLD_SIZE)
    if not isinstance(world_size, int | float) or isinstance(world_size, bool):
        world_size = len(starts)
    model = config.get(Workload.MODEL, "")
    return RunInfo(
        run_id=run_id,
        framework=framework,
        model=str(model),
        hosts=tuple(hosts),
        world_size=int(world_size),
        start_ns=start_ns,
        end_ns=end_ns,
        state=state,
        config=config,
    )
