"""Where a cold run-page open spends its time on the server: the query calls it makes.

    python bench/dashboard/profile_open.py [--db PATH] [--repeat 5] [--top 25] [--warm]

Runs the callbacks a click on a run makes, as the app does but one after the other (the
``/runs/<id>`` route; then the time series of a run not computed yet, which come apart,
and the run's findings, each by its own callback), with every cache of finished runs cleared first
(``--warm``: kept), and prints:

- the wall and CPU seconds of each callback, and of each ``DataSource`` call they make
  (``run``, ``timeseries``, ``boundaries``, ``epochs``, ``findings``): the median of
  ``--repeat`` opens (CPU seconds move much less than wall seconds with the load of a
  shared machine);
- a cProfile of the same (a second, profiled, cold open), the ``--top`` functions by
  cumulative time.

The store is the benchmark's (``make_store.py``; built on first use as by
``bench_run_page.py``).
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_store  # noqa: E402
from bench_run_page import DEFAULT_DB, find_component  # noqa: E402

from collector.store import SqliteStore  # noqa: E402
from dashboard import ids  # noqa: E402
from dashboard.app import Callbacks  # noqa: E402
from dashboard.source import DataSource  # noqa: E402

TIMED = ("run", "timeseries", "boundaries", "epochs", "findings")


def timed_source(source: DataSource, spent: dict[str, list[float]]) -> None:
    """Wrap the source's query calls to record (wall, CPU) seconds of each."""
    for name in TIMED:
        original: Callable[..., Any] = getattr(source, name)

        def wrapper(*args: Any, _original=original, _name=name, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return _original(*args, **kwargs)
            finally:
                totals = spent.setdefault(_name, [0.0, 0.0])
                totals[0] += time.perf_counter() - wall
                totals[1] += time.process_time() - cpu

        setattr(source, name, wrapper)


CALLBACKS = ("route (the page)", "time series (if apart)", "findings")


def open_run(callbacks: Callbacks, run_id: str) -> dict[str, tuple[float, float]]:
    """What a click does on the server, one after the other: the route, then the callbacks
    the page makes (its time series, if they come apart; the findings). Returns
    the (wall, CPU) seconds of each."""
    spent: dict[str, tuple[float, float]] = {}

    def timed(name: str, call: Callable[[], Any]) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        result = call()
        spent[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        return result

    page, _nav, _scroll = timed(CALLBACKS[0], lambda: callbacks.route(f"/runs/{run_id}", ""))
    pending = find_component(page, ids.RUN_PENDING)  # (older dashboards have none)
    if pending is not None and pending.data is not None:
        timed(CALLBACKS[1], lambda: callbacks.load_pending_timeseries(pending.data))
    else:
        spent[CALLBACKS[1]] = (0.0, 0.0)
    timed(CALLBACKS[2], lambda: callbacks.load_run_findings({"run_id": run_id}))
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--top", type=int, default=25, help="0: no profile")
    parser.add_argument("--warm", action="store_true", help="keep the caches between opens")
    args = parser.parse_args()
    if not args.db.exists():
        print(f"building {args.db} (8 hosts x 3 h) ...")
        make_store.build(args.db)
    store = SqliteStore(args.db)
    # the callbacks one after the other, nothing computed ahead in the background (a
    # dashboard without that option has none)
    ahead = "complete_ahead" in inspect.signature(DataSource).parameters
    source = DataSource(store, **({"complete_ahead": False} if ahead else {}))
    callbacks = Callbacks(source, poll_ms=2000)
    run_id = make_store.RUN_ID
    open_run(callbacks, run_id)  # imports, SQLite page cache

    spent: dict[str, list[float]] = {}
    timed_source(source, spent)
    opens: list[dict[str, tuple[float, float]]] = []
    for _ in range(args.repeat):
        spent.clear()
        if not args.warm:
            source.forget()
        wall, cpu = time.perf_counter(), time.process_time()
        one = open_run(callbacks, run_id)
        one["open (all three)"] = (time.perf_counter() - wall, time.process_time() - cpu)
        one |= {f"  {name}": (w, c) for name, (w, c) in spent.items()}
        opens.append(one)
    print(f"medians of {args.repeat} {'warm' if args.warm else 'cold'} opens, seconds:")
    for name in ("open (all three)", *CALLBACKS, *(f"  {n}" for n in TIMED)):
        wall = statistics.median(o.get(name, (0.0, 0.0))[0] for o in opens)
        cpu = statistics.median(o.get(name, (0.0, 0.0))[1] for o in opens)
        print(f"  {name:<26} wall {wall:6.3f}  cpu {cpu:6.3f}")

    if not args.top:
        store.close()
        return 0
    if not args.warm:
        source.forget()
    profile = cProfile.Profile()
    profile.enable()
    open_run(callbacks, run_id)
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
