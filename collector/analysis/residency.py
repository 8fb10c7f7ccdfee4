"""How much of the data set sat in each host's page cache, per epoch: measured, not inferred.

A host's local rank 0 sends, at ``run_start`` and at every ``epoch_end``, the bytes of the
data set's files in its page cache (``mincore``) and the bytes of those files
(``workloads/train/pagecache.py``). Per (host, epoch) the residency *at the start* is the
one sent at the end of the host's previous epoch (for its first epoch, at ``run_start``:
before the run), *at the end* the one its ``epoch_end`` sent. Nothing else happens between
one epoch's end and the next one's start (validation runs before ``epoch_end``).

Amounts stay bytes (``AMOUNT_KEYS``), so the ``*`` row adds hosts up as it adds every other
amount: all hosts' cached bytes over all hosts' data set bytes. ``cached_percent`` is the
one definition of the share, for every view and rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collector.analysis.run import RunModel, assign_epochs
from collector.store.api import WorkloadEvent, event_number
from contract.schema import Event, Workload

CACHED_START = "dataset_cached_start"
FILES_START = "dataset_files_start"
CACHED_END = "dataset_cached_end"
FILES_END = "dataset_files_end"
AMOUNT_KEYS = (CACHED_START, FILES_START, CACHED_END, FILES_END)

Measured = tuple[float, float]  # (cached bytes, data set bytes)


def _measured(event: WorkloadEvent) -> Measured | None:
    cached = event_number(event, Workload.DATASET_CACHED_BYTES)
    files = event_number(event, Workload.DATASET_FILES_BYTES)
    if cached is None or files is None or files <= 0:
        return None
    return cached, files


def before_run(model: RunModel) -> dict[str, Measured]:
    """Per host, the residency its ``run_start`` carried (the lowest rank's that sent one)."""
    out: dict[str, Measured] = {}
    for event in sorted(model.epoch_events, key=lambda e: e.rank):
        if event.event == Event.RUN_START and event.host not in out:
            measured = _measured(event)
            if measured is not None:
                out[event.host] = measured
    return out


def epoch_residency(model: RunModel) -> dict[tuple[str, int], dict[str, float]]:
    """Per (host, epoch): the cached and data set bytes at its start and at its end (keys
    ``AMOUNT_KEYS``; a side not measured is left out)."""
    at_end: dict[tuple[str, int], Measured] = {}
    for event, epoch in sorted(assign_epochs(model.epoch_events), key=lambda p: p[0].rank):
        if event.event == Event.EPOCH_END and (event.host, epoch) not in at_end:
            measured = _measured(event)
            if measured is not None:
                at_end[(event.host, epoch)] = measured
    first = before_run(model)
    epochs_by_host: dict[str, list[int]] = {}
    for record in model.records:
        epochs_by_host.setdefault(record.host, [])
        if record.epoch not in epochs_by_host[record.host]:
            epochs_by_host[record.host].append(record.epoch)
    out: dict[tuple[str, int], dict[str, float]] = {}
    for host, epochs in epochs_by_host.items():
        previous = first.get(host)
        for epoch in sorted(epochs):
            values: dict[str, float] = {}
            if previous is not None:
                values[CACHED_START], values[FILES_START] = previous
            end = at_end.get((host, epoch))
            if end is not None:
                values[CACHED_END], values[FILES_END] = end
            if values:
                out[(host, epoch)] = values
            previous = end
    return out


def cached_percent(cached: Any, files: Any) -> np.ndarray:
    """The share of the data set's bytes in the page cache, in percent (NaN: not measured)."""
    files = np.asarray(files, dtype=np.float64)
    positive = np.where(files > 0, files, np.nan)
    return 100.0 * np.asarray(cached, dtype=np.float64) / positive
