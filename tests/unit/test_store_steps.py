"""A run's steps as columns: ``SqliteStore.steps`` (SQLite reads the JSON fields) against
``StepTable.from_events`` (the reference: decoded events), and the step rates of the
findings against the per-event computation they replace."""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.analysis.run import EPOCH_KINDS, assign_epochs, run_model
from collector.findings.storage import step_rates
from collector.store import SqliteStore
from collector.store.api import StepTable, step_number
from collector.store.events import STEPS_BY_HOST_SQL, _joined_steps
from contract.point import Point
from contract.schema import Event, Tag, Workload
from tests.support.memory_store import MemoryStore

S = 10**9
T0 = 1_700_000_000 * S


def workload(host: str, rank: int, event: str, time_ns: int, **fields) -> Point:
    tags = {Tag.HOST: host, Tag.RUN_ID: "r", Tag.RANK: str(rank), Tag.FRAMEWORK: "tensorflow"}
    return Point(Workload.NAME, tags, {Workload.EVENT: event, **fields}, time_ns)


def step(host: str, rank: int, time_s: float, **fields) -> Point:
    return workload(host, rank, Event.STEP, T0 + round(time_s * S), **fields)


@pytest.fixture
def store(tmp_path):
    with SqliteStore(tmp_path / "steps.sqlite") as opened:
        yield opened


def reference(store, run_id: str = "r", since_ns: int | None = None) -> StepTable:
    return StepTable.from_events(store.events(run_id, since_ns, kinds=(Event.STEP,)))


def nan_list(values: np.ndarray) -> list:
    return [None if math.isnan(v) else v for v in values.tolist()]


ODD_STEPS = [
    step("node2", 1, 1, images=256, seconds=0.5, epoch=1),  # integers in the JSON
    step("node1", 0, 1, images=12.5, seconds=2.25),  # floats, no epoch field
    step("node1", 1, 1, images="many", seconds=True, epoch="one"),  # text and a bool
    step("node1", 0, 2, step=7),  # neither images nor seconds
    step("node1", 0, 3, images=False, seconds=1.0, epoch=2.0),
    step("node1", 0, 4, images=2**60, seconds=1e-3, epoch=3),
    workload("node1", 0, Event.EPOCH_START, T0, epoch=1),  # not a step: left out
]


def test_steps_from_sql_hold_each_fields_number_or_nan(store):
    store.write_points(ODD_STEPS)
    table = store.steps("r")
    # store order: time, then rank, then host
    assert table.hosts == ("node1", "node2")
    assert table.host_names().tolist() == ["node1", "node1", "node2", "node1", "node1", "node1"]
    assert table.rank.tolist() == [0, 1, 1, 0, 0, 0]
    assert table.time_ns.tolist() == [T0 + S, T0 + S, T0 + S, T0 + 2 * S, T0 + 3 * S, T0 + 4 * S]
    assert nan_list(table.images) == [12.5, None, 256.0, None, None, float(2**60)]
    assert nan_list(table.seconds) == [2.25, None, 0.5, None, 1.0, 1e-3]
    assert nan_list(table.epoch) == [None, None, 1.0, None, 2.0, 3.0]
    assert nan_list(table.step) == [None, None, None, 7.0, None, None]
    assert nan_list(table.compute) == [None] * 6  # no anatomy in these steps
    assert table.images.dtype == np.float64 and table.time_ns.dtype == np.int64
    assert table == reference(store)


def test_steps_since_a_time_and_for_a_host(store):
    store.write_points(ODD_STEPS)
    table = store.steps("r")
    later = store.steps("r", since_ns=T0 + S)  # strictly after
    assert later.time_ns.tolist() == [T0 + 2 * S, T0 + 3 * S, T0 + 4 * S]
    assert later.hosts == ("node1",)
    assert later == reference(store, since_ns=T0 + S) == table.after(T0 + S)
    assert table.after(None) is table
    node2 = table.for_host("node2")
    assert (len(node2), node2.hosts, node2.host_index.tolist()) == (1, ("node2",), [0])
    assert len(table.for_host("node9")) == 0
    assert store.steps("r", since_ns=T0 + 4 * S) == StepTable.empty()
    assert store.steps("no such run") == StepTable.empty()


def test_steps_carry_their_anatomy(store):
    store.write_points(
        [
            step("a", 0, 1, **step_fields(None, 2.0, None, 12, 0.25, 1.25, 0.5, 0)),
            step("a", 1, 1, **step_fields(None, 2.0, None, 12, 0.5)),  # a part only
        ]
    )
    table = store.steps("r")
    assert nan_list(table.step) == [12.0, 12.0]
    assert nan_list(table.input_wait) == [0.25, 0.5]
    assert nan_list(table.compute) == [1.25, None]
    assert nan_list(table.communication) == [0.5, None]
    assert nan_list(table.other) == [0.0, None]
    assert table == reference(store)


def test_tables_are_read_only(store):
    store.write_points(ODD_STEPS)
    table = store.steps("r")
    with pytest.raises(ValueError):
        table.images[0] = 1.0


def test_memory_store_and_sqlite_store_agree(store):
    steps = [ODD_STEPS[0], *ODD_STEPS[3:]]  # (no two at one time: the stores order those apart)
    memory = MemoryStore()
    memory.write(steps)
    store.write_points(steps)
    assert memory.steps("r") == store.steps("r")
    assert memory.steps("r", T0 + 2 * S) == store.steps("r", T0 + 2 * S)


def test_step_number_takes_json_numbers_only():
    assert step_number(3) == 3.0 and step_number(2.5) == 2.5
    for value in (None, "3", True, False):
        assert math.isnan(step_number(value))


# --------------------------------------------------------------------------------------
# property: whatever the steps hold, SQL and the decoded events agree
# --------------------------------------------------------------------------------------

number_values = st.one_of(
    st.none(),  # field left out
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
)
field_values = st.one_of(number_values, st.booleans(), st.text(alphabet="ab1. ", max_size=4))


SINCE_SECONDS = st.one_of(st.none(), st.integers(min_value=-1, max_value=40))


def steps_holding(values: st.SearchStrategy) -> st.SearchStrategy:
    """Lists of (host, rank, time in s, one value per ``StepTable.FIELDS``)."""
    return st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "node-1"]),
            st.integers(min_value=-1, max_value=3),
            st.integers(min_value=0, max_value=40),
            st.tuples(*[values] * len(StepTable.FIELDS)),
        ),
        max_size=30,
    )


def step_fields(*values: Any) -> dict[str, Any]:
    """A step event's fields, the first ``len(values)`` of ``StepTable.FIELDS`` (images,
    seconds, epoch, ...), leaving out those given as None."""
    fields = dict(zip(StepTable.FIELDS.values(), values, strict=False))
    return {name: value for name, value in fields.items() if value is not None}


def points_of(steps: list[tuple]) -> list[Point]:
    return [
        step(host, rank, time_s, **step_fields(*values)) for host, rank, time_s, values in steps
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_holding(field_values), since_s=SINCE_SECONDS)
def test_sql_steps_equal_the_decoded_events(steps, since_s):
    since_ns = None if since_s is None else T0 + since_s * S
    with tempfile.TemporaryDirectory() as folder, SqliteStore(Path(folder) / "s.sqlite") as store:
        store.write_points(points_of(steps))
        assert store.steps("r", since_ns) == reference(store, since_ns=since_ns)


def joined_steps(store, since_ns: int | None) -> StepTable | None:
    """What the joined query alone gives (None: ``steps()`` reads row by row instead)."""
    since = "" if since_ns is None else " AND time_ns > ?"
    args = ["r", Event.STEP] + ([] if since_ns is None else [since_ns])
    rows = store.db.read_conn().execute(STEPS_BY_HOST_SQL.format(since=since), args).fetchall()
    return _joined_steps(rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_holding(number_values), since_s=SINCE_SECONDS)
def test_joined_steps_equal_the_decoded_events_when_all_are_numbers(steps, since_s):
    """Steps whose fields are numbers or missing are read by the joined query (each host's
    columns in one row: the fast path), bit for bit as the decoded events give them."""
    since_ns = None if since_s is None else T0 + since_s * S
    with tempfile.TemporaryDirectory() as folder, SqliteStore(Path(folder) / "s.sqlite") as store:
        store.write_points(points_of(steps))
        joined = joined_steps(store.event_store, since_ns)
        assert joined is not None
        assert joined == store.steps("r", since_ns) == reference(store, since_ns=since_ns)


def test_a_step_holding_text_or_a_bool_is_read_row_by_row(store):
    store.write_points(ODD_STEPS)
    assert joined_steps(store.event_store, None) is None  # text and bools among the values
    assert store.steps("r") == reference(store)
    assert joined_steps(store.event_store, T0 + 3 * S) is not None  # only numbers after 3 s
    nested = step("node1", 0, 5, images=[1, 2], seconds={"a": 1})
    store.write_points([nested])
    assert joined_steps(store.event_store, T0 + 3 * S) is None
    assert store.steps("r", T0 + 3 * S) == reference(store, since_ns=T0 + 3 * S)


# --------------------------------------------------------------------------------------
# step rates: the columns give what the per-event walk gave
# --------------------------------------------------------------------------------------


def step_rates_by_events(store, warmup_steps: int) -> dict:
    """The per-event computation ``step_rates`` replaced: the epoch events, then the steps,
    merged in time order (an epoch_start before a step at its time), each step's epoch from
    ``assign_epochs``."""
    events = store.events("r", kinds=EPOCH_KINDS) + store.events("r", kinds=(Event.STEP,))
    seen: dict[tuple[str, int], int] = defaultdict(int)
    rates: dict[tuple[str, int], list[float]] = defaultdict(list)
    for event, epoch in assign_epochs(sorted(events, key=lambda e: (e.time_ns, e.rank))):
        if event.event != Event.STEP:
            continue
        rank_key = (event.host, event.rank)
        seen[rank_key] += 1
        if seen[rank_key] <= warmup_steps:
            continue
        images = event.fields.get(Workload.IMAGES)
        seconds = event.fields.get(Workload.SECONDS)
        if isinstance(images, int | float) and isinstance(seconds, int | float) and seconds > 0:
            rates[(event.host, epoch)].append(float(images) / float(seconds))
    return rates


def test_steps_without_an_epoch_take_their_ranks_latest_epoch_start():
    memory = MemoryStore()
    memory.write(
        [
            workload("a", 0, Event.EPOCH_START, T0, epoch=1),
            workload("a", 1, Event.EPOCH_START, T0 + 5 * S, epoch=1),
            step("a", 0, 5, images=100, seconds=1.0),  # epoch 1
            step("a", 1, 4, images=100, seconds=2.0),  # rank 1's epoch has not started
            step("a", 1, 6, images=100, seconds=4.0),  # epoch 1
            workload("a", 0, Event.EPOCH_START, T0 + 10 * S, epoch=2),
            step("a", 0, 10, images=300, seconds=1.0),  # at its epoch's start: epoch 2
            step("a", 0, 11, images=100, seconds=2.0, epoch=7),  # its own field wins
            step("a", 0, 12, images=100, seconds=0.0),  # no duration: no rate
        ]
    )
    events = memory.events("r", kinds=EPOCH_KINDS)
    rates = step_rates(memory.steps("r"), run_model(events), warmup_steps=0)
    assert dict(rates) == {("a", 1): [100.0, 25.0], ("a", 2): [300.0], ("a", 7): [50.0]}
    # warm-up counts each rank's steps that found an epoch: rank 0's first, none of rank 1's
    rates = step_rates(memory.steps("r"), run_model(events), warmup_steps=1)
    assert dict(rates) == {("a", 2): [300.0], ("a", 7): [50.0]}
    assert rates == step_rates_by_events(memory, 1)


numbers = st.one_of(
    st.none(),
    st.integers(min_value=-5, max_value=10**6),
    st.floats(min_value=-10.0, max_value=1e4, allow_nan=False),
    st.text(alphabet="x", max_size=1),
)
run_strategy = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(min_value=0, max_value=2),
        st.integers(min_value=0, max_value=30),
        st.sampled_from([Event.STEP, Event.STEP, Event.STEP, Event.EPOCH_START]),
        numbers,
        numbers,
        st.one_of(st.none(), st.integers(min_value=1, max_value=4), st.just("x")),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(run=run_strategy, warmup=st.integers(min_value=0, max_value=3))
def test_step_rates_equal_the_per_event_walk(run, warmup):
    # (bools left out: the per-event walk took True for 1, a StepTable for no number)
    points = [
        workload(host, rank, event, T0 + time_s * S, **step_fields(images, seconds, epoch))
        for host, rank, time_s, event, images, seconds, epoch in run
    ]
    memory = MemoryStore()
    memory.write(points)
    epoch_events = memory.events("r", kinds=EPOCH_KINDS)
    mine = step_rates(memory.steps("r"), run_model(epoch_events), warmup)
    assert mine == step_rates_by_events(memory, warmup)
