"""Block algebra: pure functions over the columns of one tag set, no SQL.

A block holds the samples of one tag set as numpy columns: ``times`` int64[n] ascending and
unique, ``vals`` float64[k, n] (k series of the tag set), NaN marking "no value at that
time" (line protocol cannot carry NaN, so it is never a real sample). The stored forms are
described in ``collector.store.database``; this module turns them into blocks and back:

* :func:`batch_row_blocks` / :func:`gather_batches`: the groups of ``batches`` rows as blocks;
* :func:`merge_blocks`: several blocks as one set of columns, later writes winning;
* :func:`window_rows`: merged columns cut into ``blocks`` rows, one per ``CHUNK_NS`` window;
* :func:`cut_blocks`: each wanted series over some blocks, cut to a time range plus the
  nearest sample on either side.

Write order decides duplicates (same series, same time): a block's ``block_id`` is its
``blocks`` row id, and the groups of a ``batches`` row sort after every block
(``BATCH_ORDER`` + batch id), because compaction takes batches oldest first.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

CHUNK_NS = 10 * 60 * 10**9  # compaction windows: 600 samples per series at 1 Hz


@dataclass(slots=True)
class Block:
    """Columns of one tag set: a ``blocks`` row, or one group of a ``batches`` row."""

    block_id: int  # write order (batches: BATCH_ORDER + batch id)
    min_ns: int
    max_ns: int
    ids: bytes  # the series ids as stored (compared as bytes: same field set?)
    times: np.ndarray  # int64 (n,)
    vals: np.ndarray  # float64 (k, n), possibly a transposed view
    holes: bool = True  # may hold NaN (no value); False lets reads skip looking

    @property
    def series_ids(self) -> np.ndarray:
        return np.frombuffer(self.ids, dtype=np.int64)

    @classmethod
    def from_row(cls, row: tuple) -> Block:
        block_id, min_ns, max_ns, holes, ids, times, vals = row
        times_ns = np.frombuffer(times, dtype=np.int64)
        values = np.frombuffer(vals, dtype=np.float64).reshape(len(ids) // 8, times_ns.size)
        return cls(block_id, min_ns, max_ns, ids, times_ns, values, bool(holes))


BATCH_ORDER = 1 << 62  # batches sort after every block: they hold the newest writes


def batch_row_blocks(row: tuple) -> Iterator[tuple[int, Block]]:
    """(tag set id, block) of each group in a ``batches`` row, as views of its BLOBs."""
    batch_id, groups, ids, times, vals = row
    index = np.frombuffer(groups, dtype=np.int64).reshape(-1, 3)
    all_times = np.frombuffer(times, dtype=np.int64)
    all_vals = np.frombuffer(vals, dtype=np.float64)
    time_stops = np.cumsum(index[:, 1])
    firsts = all_times[time_stops - index[:, 1]].tolist()
    lasts = all_times[time_stops - 1].tolist()
    order = BATCH_ORDER + batch_id
    id_at = time_at = value_at = 0
    for group, (tagset_id, n, k) in enumerate(index.tolist()):
        block_vals = all_vals[value_at : value_at + n * k].reshape(n, k).T
        block = Block(
            order,
            firsts[group],
            lasts[group],
            ids[id_at * 8 : (id_at + k) * 8],
            all_times[time_at : time_at + n],
            block_vals,
        )
        yield tagset_id, block
        id_at += k
        time_at += n
        value_at += n * k


def gather_batches(rows: list[tuple]) -> dict[int, list[Block]]:
    """Each tag set's samples in ``batches`` rows (in id order), as one block per tag set
    when its groups share one field set and follow each other in time (the usual case),
    else as one block per group. Vectorised over all groups: per-group Python work is one
    bytes slice."""
    indexes, times_parts, vals_parts, ids_parts, batch_of_group = [], [], [], [], []
    for batch_id, groups, ids, times, vals in rows:
        index = np.frombuffer(groups, dtype=np.int64).reshape(-1, 3)
        indexes.append(index)
        batch_of_group.append(np.full(len(index), batch_id, dtype=np.int64))
        times_parts.append(np.frombuffer(times, dtype=np.int64))
        vals_parts.append(np.frombuffer(vals, dtype=np.float64))
        ids_parts.append(ids)
    index = np.concatenate(indexes)
    batch_ids = np.concatenate(batch_of_group)
    all_times = np.concatenate(times_parts)
    all_vals = np.concatenate(vals_parts)
    all_ids = b"".join(ids_parts)
    tagsets, counts, widths = index[:, 0], index[:, 1], index[:, 2]
    time_starts = np.cumsum(counts) - counts
    value_counts = counts * widths
    value_starts = np.cumsum(value_counts) - value_counts
    id_stops = np.cumsum(widths).tolist()
    id_starts = (np.cumsum(widths) - widths).tolist()
    ids_of = [all_ids[a * 8 : b * 8] for a, b in zip(id_starts, id_stops, strict=True)]
    firsts = all_times[time_starts]
    lasts = all_times[time_starts + counts - 1]

    # by tag set, then by time: concurrent requests commit in any order, but groups that
    # do not overlap in time hold no duplicate to settle, so their write order is moot
    order = np.lexsort((firsts, tagsets))
    sorted_tagsets = tagsets[order]
    starts = np.flatnonzero(np.r_[True, sorted_tagsets[1:] != sorted_tagsets[:-1]]).tolist()
    stops = [*starts[1:], len(order)]
    follows = np.r_[False, firsts[order][1:] > lasts[order][:-1]].tolist()
    out_time_stops = np.cumsum(counts[order]).tolist()
    out_value_stops = np.cumsum(value_counts[order]).tolist()
    times_sorted = all_times[ranges(time_starts[order], counts[order])]
    vals_sorted = all_vals[ranges(value_starts[order], value_counts[order])]
    order_list = order.tolist()
    firsts_list, lasts_list = firsts.tolist(), lasts.tolist()
    found: dict[int, list[Block]] = {}
    for start, stop in zip(starts, stops, strict=True):
        members = order_list[start:stop]
        tagset_id = int(sorted_tagsets[start])
        first = members[0]
        width = int(widths[first])
        if all(ids_of[g] == ids_of[first] for g in members) and all(follows[start + 1 : stop]):
            t_from = out_time_stops[start - 1] if start else 0
            v_from = out_value_stops[start - 1] if start else 0
            times = times_sorted[t_from : out_time_stops[stop - 1]]
            vals = vals_sorted[v_from : out_value_stops[stop - 1]].reshape(-1, width).T
            block = Block(
                BATCH_ORDER + int(batch_ids[members[-1]]),
                firsts_list[first],
                lasts_list[members[-1]],
                ids_of[first],
                times,
                vals,
            )
            found[tagset_id] = [block]
            continue
        blocks = []
        for g in sorted(members):  # field sets changed or writes overlap: write order
            n, k = int(counts[g]), int(widths[g])
            times = all_times[time_starts[g] : time_starts[g] + n]
            vals = all_vals[value_starts[g] : value_starts[g] + n * k].reshape(n, k).T
            order_g = BATCH_ORDER + int(batch_ids[g])
            blocks.append(Block(order_g, firsts_list[g], lasts_list[g], ids_of[g], times, vals))
        found[tagset_id] = blocks
    return found


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(start, start + length)`` for each pair, vectorised."""
    if lengths.size == 0:
        return np.empty(0, dtype=np.int64)
    out_starts = np.cumsum(lengths) - lengths
    return np.repeat(starts - out_starts, lengths) + np.arange(int(lengths.sum()))


def merge_blocks(blocks: list[Block]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One (series_ids, times, vals (k, n)) from blocks in write order; later writes win."""
    first = blocks[0]
    by_time = sorted(blocks, key=lambda block: block.min_ns)
    if all(block.ids == first.ids for block in blocks) and all(
        block.min_ns > previous.max_ns for previous, block in itertools.pairwise(by_time)
    ):  # the usual case: one field set, no two blocks at the same time
        if len(blocks) == 1:
            return first.series_ids, first.times, first.vals
        times = np.concatenate([block.times for block in by_time])
        return first.series_ids, times, np.concatenate([block.vals for block in by_time], axis=1)
    # Exact: every (series, time, value) in write order, the last of each (series, time) kept
    series_ids = np.unique(np.concatenate([block.series_ids for block in blocks]))
    times = np.unique(np.concatenate([block.times for block in blocks]))
    cells, values = [], []
    for block in blocks:
        rows = np.searchsorted(series_ids, block.series_ids)
        cols = np.searchsorted(times, block.times)
        cells.append((rows[:, None] * times.size + cols[None, :]).ravel())
        values.append(np.ascontiguousarray(block.vals).ravel())
    cell, value = np.concatenate(cells), np.concatenate(values)
    written = ~np.isnan(value)  # NaN: that write had no such field
    cell, value = cell[written], value[written]
    _, last_from_end = np.unique(cell[::-1], return_index=True)
    last = cell.size - 1 - last_from_end
    vals = np.full((series_ids.size, times.size), np.nan)
    vals.flat[cell[last]] = value[last]
    return series_ids, times, vals


def window_rows(
    tagset_id: int, series_ids: np.ndarray, times: np.ndarray, vals: np.ndarray
) -> list[tuple]:
    """``blocks`` rows of merged columns cut at ``CHUNK_NS`` windows (a series with no
    value in a window is left out of that window's block)."""
    first_window, last_window = int(times[0]) // CHUNK_NS, int(times[-1]) // CHUNK_NS
    if first_window == last_window:
        bounds = [(0, int(times.size))]
    else:
        edges = (np.flatnonzero(np.diff(times // CHUNK_NS)) + 1).tolist()
        bounds = list(zip([0, *edges], [*edges, int(times.size)], strict=True))
    holes = bool(np.isnan(vals).any())  # one pass here saves one on every read
    rows = []
    for start, stop in bounds:
        window_vals = vals[:, start:stop]
        window_ids = series_ids
        window_holes = False
        if holes:
            present = ~np.all(np.isnan(window_vals), axis=1)
            window_vals, window_ids = window_vals[present], series_ids[present]
            window_holes = bool(np.isnan(window_vals).any())
        rows.append(
            (
                tagset_id,
                int(times[start]),
                int(times[stop - 1]),
                stop - start,
                int(window_holes),
                window_ids.tobytes(),
                times[start:stop].tobytes(),
                np.ascontiguousarray(window_vals).tobytes(),
            )
        )
    return rows


def before_improvable(times: np.ndarray, block: Block, start_ns: int, end_ns: int) -> bool:
    """Could ``block`` (ending before the range) hold a later sample before start, or a
    newer write of the one found (blocks of one window may overlap: late writes)?"""
    return times.size == 0 or times[0] >= start_ns or times[0] <= block.max_ns


def after_improvable(times: np.ndarray, block: Block, start_ns: int, end_ns: int) -> bool:
    return times.size == 0 or times[-1] <= end_ns or times[-1] >= block.min_ns


def cut_blocks(
    blocks: list[Block], series_ids: list[int], start_ns: int, end_ns: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each series over the blocks, duplicates merged (later writes win), cut to
    [start, end] plus one sample either side."""
    by_time = sorted(blocks, key=lambda b: (b.min_ns, b.block_id))
    disjoint = all(b.min_ns > a.max_ns for a, b in itertools.pairwise(by_time))
    ordered = by_time if disjoint else sorted(blocks, key=lambda b: b.block_id)
    rows_of = [{sid: row for row, sid in enumerate(b.series_ids.tolist())} for b in ordered]
    has_nan = [b.holes for b in ordered]
    shared_times: np.ndarray | None = None  # all blocks' times, for series in every block
    results = []
    for series_id in series_ids:
        rows = [rows_of_block.get(series_id) for rows_of_block in rows_of]
        if disjoint and None not in rows and not any(has_nan):
            if shared_times is None:
                shared_times = concat([b.times for b in ordered], np.int64)
            times = shared_times
            pieces = [block.vals[row] for block, row in zip(ordered, rows, strict=True)]
            values = concat(pieces, np.float64)
        else:
            times_parts, value_parts = [], []
            for block, row, nan in zip(ordered, rows, has_nan, strict=True):
                if row is None:
                    continue
                block_times, block_values = block.times, block.vals[row]
                if nan:
                    keep = ~np.isnan(block_values)
                    block_times, block_values = block_times[keep], block_values[keep]
                times_parts.append(block_times)
                value_parts.append(block_values)
            times = concat(times_parts, np.int64)
            values = concat(value_parts, np.float64)
            if not disjoint and times.size > 1 and not bool(np.all(times[1:] > times[:-1])):
                order = np.argsort(times, kind="stable")
                times, values = times[order], values[order]
                last_of_run = np.append(times[1:] != times[:-1], True)
                times, values = times[last_of_run], values[last_of_run]
        first = max(int(np.searchsorted(times, start_ns, "left")) - 1, 0)
        stop = int(np.searchsorted(times, end_ns, "right")) + 1
        results.append((times[first:stop], values[first:stop]))
    return results


def concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
