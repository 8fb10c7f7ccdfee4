"""How `make test` shares its test files among pytest-xdist workers (`--dist loadfile`).

A file's tests stay on one worker, in order, as with pytest-xdist's own loadfile; files that
hold one node-wide thing (tests/conftest.py NODE_WIDE: the real Slurm, /etc/passwd under
Ansible) form one unit per thing, so two of them never run at once. pytest-xdist's
`--dist loadgroup` would do the second part from `xdist_group` marks, but with pytest 9.2
it silently stops grouping (pytest-dev/pytest-xdist#1386), hence this scheduler.

Units are handed out longest first (LONGEST: measured seconds of the slowest files), then
by their number of tests, so a long file does not start last and leave one worker running
it alone at the end.
"""

from __future__ import annotations

from collections.abc import Mapping

from xdist.scheduler import LoadScopeScheduling


def unit_of(nodeid: str, node_wide: Mapping[str, str]) -> str:
    """The unit a test belongs to: its file's node-wide thing, else its file."""
    path = nodeid.split("::", 1)[0]
    thing = node_wide.get(path)
    return f"node-wide: {thing}" if thing is not None else path


def longest_first(
    units: Mapping[str, dict[str, bool]], seconds: Mapping[str, float], node_wide: Mapping[str, str]
) -> list[str]:
    """Units in the order they are handed out: by measured seconds (a node-wide unit sums
    its files'), then by number of tests, both descending; ties keep collection order."""

    def measured(unit: str) -> float:
        if unit.startswith("node-wide: "):
            thing = unit.removeprefix("node-wide: ")
            return sum(seconds.get(path, 0.0) for path, of in node_wide.items() if of == thing)
        return seconds.get(unit, 0.0)

    order = {unit: index for index, unit in enumerate(units)}
    return sorted(units, key=lambda unit: (-measured(unit), -len(units[unit]), order[unit]))


class FileScheduling(LoadScopeScheduling):
    """pytest-xdist's loadfile, with node-wide files grouped and long units first."""

    node_wide: Mapping[str, str] = {}
    seconds: Mapping[str, float] = {}
    _ranked = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid, self.node_wide)

    def _assign_work_unit(self, node) -> None:
        # The queue is filled in collection order (or by test count) by schedule(); the
        # order units leave it is set here, once, before the first is handed out. The
        # collection itself keeps its order: workers are sent indexes into it.
        if not self._ranked:
            for unit in longest_first(self.workqueue, self.seconds, self.node_wide):
                self.workqueue.move_to_end(unit)
            self._ranked = True
        super()._assign_work_unit(node)
