"""A ceilings file's values are checked where they are read (issue 44, item 7): a value that
is not finite or outside physical bounds (``agent.ceilings.MIN_CEILING``, ``MAX_CEILING``)
disables that one ceiling with one log line; a string ``measured_at`` does the same instead of
failing the sampler at every tick. Real files in a temporary directory."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from agent.ceilings import MAX_CEILING, ceiling_problem, from_json
from agent.samplers.base import Roots
from agent.samplers.ceilings import CeilingsSampler


def entry(field: str, value: object, measured_at: object = 1_700_000_000.0) -> dict:
    return {"field": field, "device": "sda", "kind": "disk", "method": "o_direct",
            "value": value, "measured_at": measured_at}  # fmt: skip


GOOD = entry("disk_sequential_read_bytes_per_second", 2.0e9)
BAD = [
    entry("disk_random_read_bytes_per_second", 1e-300),
    entry("disk_random_read_bytes_per_second", 0.0),
    entry("disk_random_read_bytes_per_second", -5.0),
    entry("link_bytes_per_second", 1e15),
    entry("jpeg_decode_images_per_second_per_core", 1e9),
    entry("pcie_bytes_per_second", 3.0e10, measured_at="yesterday"),
    entry("nfs_read_bytes_per_second", True),
    entry("peer_throughput_bytes_per_second", float("nan")),  # json writes NaN, reads it
    entry("peer_throughput_bytes_per_second", float("inf")),
]


def test_each_bad_value_disables_its_own_ceiling(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        kept = from_json(json.dumps({"ceilings": [GOOD, *BAD]}))
    assert [(c.field, c.value) for c in kept] == [("disk_sequential_read_bytes_per_second", 2e9)]
    assert len([r for r in caplog.records if "ceiling" in r.getMessage()]) == len(BAD)


def test_the_sampler_reports_the_good_ones_every_tick(tmp_path: Path) -> None:
    path = tmp_path / "ceilings.json"
    path.write_text(json.dumps({"ceilings": [GOOD, *BAD]}))
    sampler = CeilingsSampler(Roots(), path)
    for tick in range(3):
        [point] = sampler.sample(tick)
        assert point.fields == {
            "disk_sequential_read_bytes_per_second": 2e9,
            "measured_at_seconds": 1_700_000_000.0,
        }


def test_the_bounds() -> None:
    assert MAX_CEILING["disk_sequential_read_bytes_per_second"] == 1e12
    assert ceiling_problem("link_bytes_per_second", 4.0e11, 1.0) is None  # 3.2 Tb/s
    assert "within [1, 1e+12]" in (ceiling_problem("link_bytes_per_second", 2e12, 1.0) or "")
    assert "finite" in (ceiling_problem("link_bytes_per_second", float("inf"), 1.0) or "")


def measured(field: str, value: float, kind: str = "disk", device: str = "sda"):
    from agent.ceilings import Measured

    return Measured(field, device, kind, "o_direct", value, 1_700_000_000.0)


def test_keep_writes_only_the_measurements_within_bounds(tmp_path: Path) -> None:
    """Ceilings are checked where they are written too (issue 44, item 7, last part): a
    measurement outside physical bounds is named and left out of the file, the rest kept."""
    from agent.ceilings import keep

    out = tmp_path / "ceilings.json"
    good = measured("disk_sequential_read_bytes_per_second", 2.0e9)
    refused = keep([good, measured("disk_random_read_bytes_per_second", 1e-300)], out)
    assert refused == [
        "disk_random_read_bytes_per_second of disk sda (o_direct) not written: "
        "value 1e-300 is not within [1, 1e+12]; measure it again"
    ]
    assert [entry["value"] for entry in json.loads(out.read_text())["ceilings"]] == [2.0e9]


def test_agent_ceilings_reports_an_impossible_measurement_and_does_not_write_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``agent ceilings`` with a disk whose timed read came out at 1e-300 B/s and a link at
    1e15 B/s: each is logged as not written, the exit status is 1, and the file holds the
    other ceilings only (before: written, then 'inf% of the disk read ceiling'). The
    measuring is replaced (``agent.ceilings.measure``): no real disk here reads that slow."""
    from agent import ceilings, cli

    found = [
        measured("disk_sequential_read_bytes_per_second", 2.0e9),
        measured("disk_random_read_bytes_per_second", 1e-300),
        measured("link_bytes_per_second", 1e15, kind="net", device="eth0"),
        measured("jpeg_decode_images_per_second_per_core", 180.0, kind="cpu", device="cpu"),
    ]
    monkeypatch.setattr(ceilings, "measure", lambda *args, **kwargs: list(found))
    out = tmp_path / "ceilings.json"
    root = logging.getLogger()
    # the command sets the root logger's handler and level: put them back afterwards
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    status = cli.main(["ceilings", "--data-dir", str(tmp_path), "--out", str(out)])
    assert status == cli.EXIT_ERROR
    errors = [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]
    assert any(
        "disk_random_read_bytes_per_second of disk sda" in e and "not written" in e for e in errors
    ), errors
    assert any(
        "link_bytes_per_second of net eth0" in e and "1000000000000000.0 is not" in e
        for e in errors
    ), errors
    kept = ceilings.from_json(out.read_text())
    assert [(c.field, c.value) for c in kept] == [
        ("disk_sequential_read_bytes_per_second", 2.0e9),
        ("jpeg_decode_images_per_second_per_core", 180.0),
    ]
