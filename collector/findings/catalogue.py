"""The catalogue of every finding, generated from the family modules themselves, so the
table in docs/findings.md cannot drift from the code (``tests/unit/test_findings_catalogue.py``).

For each rule it reads, with ``ast``, the family module that holds it: the wording
function that makes its ``Finding(rule=...)`` (and the severities it can give), the
evidence type that function takes, the detection that returns that type, the numeric
thresholds (module constants in UPPER case) the detection reads, directly or through the
module's own functions it calls, and the first sentence of the detection's docstring (or
of the rule's paragraph in the module's docstring). What a rule cannot see is not in the
code, so it is written here, once per rule.

    python -m collector.findings.catalogue            # print the table
    python -m collector.findings.catalogue --write    # put it into docs/findings.md
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

FAMILIES = (
    "cache",
    "storage",
    "input",
    "scaling",
    "stragglers",
    "learning",
    "contention",
    "jobs",
    "inference",
)
SEVERITIES = ("CRITICAL", "WARNING", "INFO")
START = "<!-- catalogue: start (python -m collector.findings.catalogue --write) -->"
END = "<!-- catalogue: end -->"
DOC = Path(__file__).resolve().parents[2] / "docs" / "findings.md"

# what a rule decides, where neither its module's docstring nor its detection's says it in a
# sentence of its own
DECIDES = {
    "contention": "Other processes than the training's took a share of the host's CPUs in "
    "epochs where the CPUs were saturated; they are named, with the images/s the run lost",
    "extra_epochs_to_target": "A larger run of the scaling group took more epochs than the "
    "smaller one to reach the same top-1 target",
    "cpu_oversubscription": "The ranks' threads, loader workers and cores on a host, judged "
    "against the cores they may use (CPU quota, affinity)",
    "int8_accuracy_loss": "INT8 top-1 below FP32's by more than ``INT8_TOP1_LOSS_LIMIT``",
}

CANNOT_SEE = {
    "cache_warmup": "reads of the data set apart from the libraries a rank loads, unless the "
    "run measured the data set's page-cache residency (--data-dir); caching on the storage "
    "server",
    "dataset_cached_before_run": "a data set whose files the ranks did not name (--data-dir); "
    "the storage server's own cache",
    "dataset_fits_in_memory": "how much of the RAM other jobs hold: it reads the run's "
    "configuration, not the node's use",
    "dataset_evicted": "which other process's memory pushed the data set out, beyond the "
    "kernel's refault and drop counters",
    "fabric_carries_storage": "other jobs' traffic on the same ports; storage that does "
    "not cross the fabric the agent reads",
    "storage_bound": "the storage server's own load and its other clients",
    "precision_read_demand": "anything without a like run at another precision in the store",
    "input_bound": "which stage of the input pipeline (decoding, augmentation) takes the CPU",
    "input_wait": "the loader's worker count and queue depth: with no storage, decode or "
    "CPU evidence its cause stays undetermined",
    "accelerator_utilisation": "how well the device computes while busy: AU counts input wait only",
    "epoch_restart": "what restarts beyond a profiled PyTorch loader's worker processes "
    "(shuffle buffers, an input iterator made per epoch in TensorFlow or MXNet) or the "
    "framework's own settings",
    "startup": "anything in a run of one epoch, which has no settled epochs to compare with",
    "scaling_loss": "congestion from other jobs, a different GPU, driver or framework "
    "version between the two runs",
    "extra_epochs_to_target": "runs without validation top-1, or with different targets",
    "straggler": "whether a slow rank is its device or the scheduler, where ranks share CPUs",
    "divergence": "its cause, beyond what the run's configuration states",
    "not_learning": "a task whose chance level the run did not send (num_classes)",
    "contention": "contention for memory bandwidth, caches or the GPU: only CPU time",
    "cpu_oversubscription": "threads a library starts after the rank's first report",
    "job_gpus_idle": "GPUs a job uses through a process outside its cgroup",
    "job_cpus_unused": "CPU a job's processes spend outside its cgroup",
    "job_memory_overrequested": "memory a job needs briefly between two samples",
    "job_shared_node": "what the other jobs did to this one: only that they were there",
    "int8_accuracy_loss": "accuracy on data other than the run's validation pictures",
    "int8_slower": "why, beyond the execution provider that ran it",
    "throughput_saturated": "the device's own counters where the provider reports none",
    "timing_unsteady": "the cause of the spread: only that the timings disagree",
}


@dataclass(frozen=True)
class RuleEntry:
    name: str
    family: str
    scope: str  # run, job or inference
    severities: tuple[str, ...]
    decides: str
    thresholds: tuple[tuple[str, str], ...]
    cannot_see: str


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _reach(start: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> set[str]:
    """Every name ``start`` reads, through the module's own functions it calls."""
    seen, todo, names = {start.name}, [start], set()
    while todo:
        found = _names(todo.pop())
        names |= found
        for name in found - seen:
            if name in functions:
                seen.add(name)
                todo.append(functions[name])
    return names


def _rule_of(function: ast.FunctionDef) -> str | None:
    for node in ast.walk(function):
        if (
            isinstance(node, ast.keyword)
            and node.arg == "rule"
            and isinstance(node.value, ast.Constant)
        ):
            return node.value.value
    return None


def _first_sentence(text: str | None) -> str:
    if not text:
        return ""
    flat = " ".join(text.split())
    return re.split(r"(?<=\.)\s", flat, maxsplit=1)[0]


def _rule_paragraph(module_doc: str, rule: str) -> str:
    match = re.search(rf"^``{rule}``\n((?:    .*\n?)+)", module_doc or "", re.M)
    return _first_sentence(match.group(1)) if match else ""


def _number(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return f"{value:g}" if isinstance(value, float) else f"{value:,}"


def family_entries(family: str) -> list[RuleEntry]:
    module = importlib.import_module(f"collector.findings.{family}")
    base = importlib.import_module("collector.findings.base")
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    functions = _functions(tree)
    entries = []
    for function in functions.values():
        rule = _rule_of(function)
        if rule is None or not function.args.args:
            continue
        annotation = function.args.args[0].annotation
        evidence = annotation.id if isinstance(annotation, ast.Name) else None
        severities = tuple(s.lower() for s in SEVERITIES if s in _reach(function, functions))
        detector = next(
            (
                f
                for f in functions.values()
                if f.name.startswith("detect_")
                and f.returns is not None
                and evidence in _names(f.returns)
            ),
            None,
        )
        thresholds = []
        if detector is not None:
            for name in sorted(_reach(detector, functions)):
                if not re.fullmatch(r"[A-Z][A-Z0-9_]+", name):
                    continue
                value = getattr(module, name, getattr(base, name, None))
                text = _number(value)
                if text is not None and name != "BYTES_PER_MB":
                    thresholds.append((name, text))
        decides = (
            DECIDES.get(rule)
            or _rule_paragraph(module.__doc__ or "", rule)
            or _first_sentence(ast.get_docstring(detector) if detector is not None else None)
        )
        scope = {"jobs": "job", "inference": "inference"}.get(family, "run")
        entries.append(
            RuleEntry(rule, family, scope, severities, decides, tuple(thresholds), CANNOT_SEE[rule])
        )
    return entries


def catalogue() -> list[RuleEntry]:
    """Every rule, run rules in the order the engine runs them, then job and inference
    rules."""
    from collector.findings.engine import all_rules

    entries = {e.name: e for family in FAMILIES for e in family_entries(family)}
    order = [r.__name__ for r in all_rules()]
    ordered = [entries[name] for name in order if name in entries]
    return ordered + [e for e in entries.values() if e.name not in order]


def table(entries: list[RuleEntry]) -> str:
    lines = [
        "| rule | family | scope | severity | what it decides | thresholds | what it cannot see |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in entries:
        thresholds = ", ".join(f"`{name}` {value}" for name, value in e.thresholds) or "-"
        cells = [
            f"`{e.name}`",
            f"[{e.family}](../collector/findings/{e.family}.py)",
            e.scope,
            " or ".join(e.severities) or "-",
            e.decides.replace("|", "\\|"),
            thresholds,
            e.cannot_see,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def with_table(document: str, generated: str) -> str:
    head, _, rest = document.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{generated}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC}")
    args = parser.parse_args(argv)
    generated = table(catalogue())
    if not args.write:
        sys.stdout.write(generated)
        return 0
    DOC.write_text(with_table(DOC.read_text(encoding="utf-8"), generated), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
