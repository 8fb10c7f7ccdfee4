"""Whose each series and each job is (issue 44, items 1 and 2): checked at ingest, after
the token's scope (``collector.ingest.scopes``) and before the store.

* **A series belongs to the first scoped identity that wrote it** (a series: a measurement
  and its tag set), stamped in the store file's ``series_owners`` table. Another
  non-admin identity's write to it is left out and named (403). An admin writes any series
  and stamps none, so a store filled through the single ``--token-file`` or with no token
  moves to scoped tokens without locking its agents out of their own hosts.
* **A Slurm job belongs to its user** as the agents report it: a ``slurm_job`` series
  written by a node (or admin) token names the job's ``user``, kept in ``job_users``
  (the first report wins: a job's user never changes).
* **A run token (subject: a user) writes its own runs and jobs only**: samples tagged with
  a ``run_id`` it owns (or creates in the same batch) or a ``job_id`` of its user; events
  whose ``slurm_job_id`` (or a TaskProlog run id ``slurm-<job>[.<step>]``) names another
  user's job are refused, whoever created the run. A job whose user no agent has reported
  yet is not refused (a rank may start before the agent's first push): see
  docs/reliability.md section 16 for what that leaves open.

Cost: one dict look-up per series (and per job) of a batch once its owner is known; the
store is asked once per new series, in one transaction per batch.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from dataclasses import replace

from collector.lineprotocol import ParsedBody, SampleGroup
from collector.store.database import WRITE_BUSY_SECONDS, Database
from contract.point import Point
from contract.schema import JobInfo, Tag, Workload
from netserve.tokens import OPEN, Identity, Scope

SERIES_OWNERS_TABLE = (
    "CREATE TABLE IF NOT EXISTS series_owners (series TEXT PRIMARY KEY, owner TEXT NOT NULL)"
)
JOB_USERS_TABLE = (
    "CREATE TABLE IF NOT EXISTS job_users (job_id TEXT PRIMARY KEY, user TEXT NOT NULL)"
)
# the run ids the TaskProlog gives a job's runs (workloads/autoprofile/slurm.py)
_TASKPROLOG_RUN = re.compile(r"slurm-([0-9]+)(?:\.[0-9A-Za-z_]+)?")
UNKNOWN_JOB_RECHECK_SECONDS = 5.0  # a job no agent has named: asked again after this long

SeriesKey = tuple[str, tuple]


def series_key(group: SampleGroup) -> SeriesKey:
    return group.measurement, tuple(group.tag_items)


def _stored_key(key: SeriesKey) -> str:
    measurement, tag_items = key
    return json.dumps([measurement, sorted(tag_items)], separators=(",", ":"))


def _described(key: SeriesKey) -> str:
    measurement, tag_items = key
    return ",".join([measurement, *(f"{name}={value}" for name, value in sorted(tag_items))])


class Ownership:
    """The owners of series and jobs of one store file, cached in memory (owners never
    change, so a cached owner is never stale)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._series: dict[SeriesKey, str] = {}
        self._job_users: dict[str, str] = {}
        self._run_owners: dict[str, str] = {}
        self._unknown_jobs: dict[str, float] = {}  # job id -> when last asked (monotonic)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the check

    def check(self, identity: Identity, parsed: ParsedBody) -> tuple[ParsedBody, list[str]]:
        """The part of ``parsed`` that ``identity`` may write as owner, and one line per
        series, run or job it may not (each naming the owner)."""
        if identity == OPEN:  # no tokens: nothing is scoped, nothing to look at
            return parsed, []
        if identity.is_admin:
            self._note_job_users(parsed.groups)
            return parsed, []
        refused: list[str] = []
        groups = parsed.groups
        if identity.scope == Scope.RUN:
            groups = self._own_runs_and_jobs(identity, parsed, refused)
        groups = self._owned_series(identity, groups, refused)
        if identity.scope == Scope.NODE:
            self._note_job_users(groups)
        events = parsed.events
        if identity.scope == Scope.RUN and events:
            events = self._events_of_own_jobs(identity, events, refused)
        if not refused:
            return parsed, []
        left_out = sum(g.n for g in parsed.groups) - sum(g.n for g in groups)
        left_out += len(parsed.events) - len(events)
        return replace(parsed, groups=groups, events=events, points=parsed.points - left_out), (
            refused
        )

    def _own_runs_and_jobs(
        self, identity: Identity, parsed: ParsedBody, refused: list[str]
    ) -> list[SampleGroup]:
        """A run token's samples that name a run it owns (or creates in this batch) or a
        job of its user."""
        created_here = {event.tags.get(Tag.RUN_ID, "") for event in parsed.events}
        kept = []
        for group in parsed.groups:
            tags = dict(group.tag_items)
            run_id, job_id = tags.get(Tag.RUN_ID), tags.get(Tag.JOB_ID)
            problem = None
            if run_id is not None:
                owner = self.run_owner(run_id)
                if owner is None and run_id not in created_here:
                    problem = f"run {run_id!r} does not exist yet (send its run_start first)"
                elif owner is not None and owner != identity.name:
                    problem = f"run {run_id!r} belongs to {owner}, not {identity.name}"
            elif job_id is not None:
                user = self.job_user(job_id)
                if user is None:
                    problem = f"job {job_id!r}: no agent has reported its user yet"
                elif user != identity.subject:
                    problem = f"job {job_id!r} is user {user}'s, not {identity.name}'s"
            else:
                problem = f"{identity.name} may write its own runs' and jobs' series only"
            if problem is None:
                kept.append(group)
            else:
                refused.append(f"{group.n} point(s) of {group.measurement}: {problem}")
        return kept

    def _owned_series(
        self, identity: Identity, groups: list[SampleGroup], refused: list[str]
    ) -> list[SampleGroup]:
        keys = [series_key(group) for group in groups]
        unknown = [key for key in dict.fromkeys(keys) if key not in self._series]
        if unknown:
            self._claim_series(unknown, identity.name)
        kept = []
        for group, key in zip(groups, keys, strict=True):
            owner = self._series[key]
            if owner == identity.name:
                kept.append(group)
            else:
                refused.append(
                    f"{group.n} point(s) of {_described(key)}: the series belongs to "
                    f"{owner}, not {identity.name}"
                )
        return kept

    def _events_of_own_jobs(
        self, identity: Identity, events: list[Point], refused: list[str]
    ) -> list[Point]:
        """A run token's events, less those of runs that name another user's job."""
        foreign: dict[str, str] = {}  # run id -> why
        for event in events:
            run_id = event.tags.get(Tag.RUN_ID, "")
            if run_id in foreign:
                continue
            jobs = {str(event.fields.get(Workload.SLURM_JOB_ID, "") or "")}
            named = _TASKPROLOG_RUN.fullmatch(run_id)
            if named:
                jobs.add(named.group(1))
            for job_id in sorted(jobs - {""}):
                user = self.job_user(job_id)
                if user is not None and user != identity.subject:
                    foreign[run_id] = f"job {job_id!r} is user {user}'s, not {identity.name}'s"
        if not foreign:
            return events
        counts: dict[str, int] = {}
        kept = []
        for event in events:
            run_id = event.tags.get(Tag.RUN_ID, "")
            if run_id in foreign:
                counts[run_id] = counts.get(run_id, 0) + 1
            else:
                kept.append(event)
        refused.extend(
            f"run {run_id!r}: {foreign[run_id]}: its {count} event(s) refused"
            for run_id, count in sorted(counts.items())
        )
        return kept

    # ------------------------------------------------------------------ the owners

    def run_owner(self, run_id: str) -> str | None:
        owner = self._run_owners.get(run_id)
        if owner is None:
            owner = self._select_one("SELECT owner FROM run_owners WHERE run_id = ?", run_id)
            if owner is not None:
                self._run_owners[run_id] = owner
        return owner

    def job_user(self, job_id: str) -> str | None:
        user = self._job_users.get(job_id)
        if user is not None:
            return user
        asked = self._unknown_jobs.get(job_id)
        if asked is not None and time.monotonic() - asked < UNKNOWN_JOB_RECHECK_SECONDS:
            return None
        user = self._select_one("SELECT user FROM job_users WHERE job_id = ?", job_id)
        if user is None:
            self._unknown_jobs[job_id] = time.monotonic()
        else:
            self._job_users[job_id] = user
            self._unknown_jobs.pop(job_id, None)
        return user

    def _select_one(self, sql: str, key: str) -> str | None:
        try:
            row = self.db.read_conn().execute(sql, (key,)).fetchone()
        except sqlite3.OperationalError:  # a file no scoped write has reached: no table
            return None
        return row[0] if row else None

    def _claim_series(self, keys: list[SeriesKey], writer: str) -> None:
        """The owners of ``keys`` into the cache, those nobody has stamped ``writer``'s."""
        stored = {_stored_key(key): key for key in keys}
        with self._lock, self.db.transaction(WRITE_BUSY_SECONDS) as conn:
            conn.execute(SERIES_OWNERS_TABLE)
            conn.executemany(
                "INSERT OR IGNORE INTO series_owners (series, owner) VALUES (?, ?)",
                [(text, writer) for text in stored],
            )
            names = list(stored)
            for start in range(0, len(names), 500):
                chunk = names[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for text, owner in conn.execute(
                    f"SELECT series, owner FROM series_owners WHERE series IN ({marks})", chunk
                ):
                    self._series[stored[text]] = owner

    def _note_job_users(self, groups: list[SampleGroup]) -> None:
        """Each job's user from the ``slurm_job`` series a node or admin wrote."""
        reported: dict[str, str] = {}
        for group in groups:
            if group.measurement != JobInfo.NAME:
                continue
            tags = dict(group.tag_items)
            job_id, user = tags.get(Tag.JOB_ID), tags.get(Tag.USER)
            if job_id and user and job_id not in self._job_users:
                reported[job_id] = user
        if not reported:
            return
        with self._lock, self.db.transaction(WRITE_BUSY_SECONDS) as conn:
            conn.execute(JOB_USERS_TABLE)
            conn.executemany(
                "INSERT OR IGNORE INTO job_users (job_id, user) VALUES (?, ?)",
                list(reported.items()),
            )
            for job_id in reported:
                row = conn.execute(
                    "SELECT user FROM job_users WHERE job_id = ?", (job_id,)
                ).fetchone()
                self._job_users[job_id] = row[0]
                self._unknown_jobs.pop(job_id, None)
