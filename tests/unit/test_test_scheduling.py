"""How `make test` hands test files to its pytest-xdist workers (tests/support/scheduling.py)
and the lists it reads in tests/conftest.py."""

from __future__ import annotations

from tests.conftest import LONGEST, NODE_WIDE, REPO_ROOT, SERIAL
from tests.support.scheduling import longest_first, unit_of

NODE_WIDE_EXAMPLE = {
    "tests/system/test_slurm_real.py": "slurm",
    "tests/system/test_slurm_one_node.py": "slurm",
    "tests/system/test_ansible_deploy.py": "ansible",
}


def test_a_node_wide_files_tests_share_one_unit_with_the_things_other_files():
    assert unit_of("tests/system/test_slurm_real.py::test_a", NODE_WIDE_EXAMPLE) == (
        "node-wide: slurm"
    )
    assert unit_of("tests/system/test_slurm_one_node.py::test_b[x::y]", NODE_WIDE_EXAMPLE) == (
        "node-wide: slurm"
    )
    assert unit_of("tests/system/test_ansible_deploy.py::T::test_c", NODE_WIDE_EXAMPLE) == (
        "node-wide: ansible"
    )
    assert unit_of("tests/unit/test_x.py::test_d", NODE_WIDE_EXAMPLE) == "tests/unit/test_x.py"


def test_units_leave_longest_first_then_by_test_count_then_in_collection_order():
    units = {
        "tests/unit/a.py": dict.fromkeys(["1", "2", "3"], False),
        "tests/unit/b.py": dict.fromkeys(["4"], False),
        "node-wide: slurm": dict.fromkeys(["5"], False),
        "tests/system/learn.py": dict.fromkeys(["6", "7"], False),
        "tests/unit/c.py": dict.fromkeys(["8"], False),
    }
    seconds = {
        "tests/system/learn.py": 300.0,
        # a node-wide unit costs its files' sum: 150 + 200
        "tests/system/test_slurm_real.py": 150.0,
        "tests/system/test_slurm_one_node.py": 200.0,
    }
    assert longest_first(units, seconds, NODE_WIDE_EXAMPLE) == [
        "node-wide: slurm",
        "tests/system/learn.py",
        "tests/unit/a.py",
        "tests/unit/b.py",
        "tests/unit/c.py",
    ]


def test_the_lists_name_existing_files_and_a_file_is_in_one_list_at_most():
    for path in [*NODE_WIDE, *SERIAL, *LONGEST]:
        assert (REPO_ROOT / path).is_file(), path
    assert not set(NODE_WIDE) & set(SERIAL)
    # a file that runs alone is never in a parallel pass: its time there means nothing
    assert not set(LONGEST) & set(SERIAL)
