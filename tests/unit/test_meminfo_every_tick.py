"""The memory sampler's every-tick meminfo path against the line-by-line parser, on every
captured host tree (../shared/fixtures/roots) and this machine's own /proc/meminfo."""

from __future__ import annotations

from pathlib import Path

from agent.samplers.memory import MEMINFO_FIELDS, parse_meminfo, wanted_meminfo
from tests.conftest import FIXTURE_ROOTS


def test_the_every_tick_meminfo_path_agrees_with_parse_meminfo_on_every_captured_tree():
    """Issue 46: a well-formed meminfo is read in one regex pass for the reported keys;
    it must give what the line-by-line parser gives."""
    trees = sorted(FIXTURE_ROOTS.glob("*/proc/meminfo"))
    assert len(trees) >= 3
    for path in [*trees, Path("/proc/meminfo")]:
        text = path.read_text()
        full = parse_meminfo(text)
        assert wanted_meminfo(text) == {k: v for k, v in full.items() if k in MEMINFO_FIELDS}


def test_text_not_in_the_kernels_form_takes_the_careful_path():
    assert wanted_meminfo("MemTotal: 12 kB\ngarbage\n") is None
    assert wanted_meminfo("MemFree: 12 kB\n") is None  # no MemTotal: not meminfo
