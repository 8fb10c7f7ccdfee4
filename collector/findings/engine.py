"""The findings engine: every rule, from its family's module (``cache``, ``storage``,
``input``, ``scaling``, ``stragglers``, ``learning``, ``contention``), run over one
``RunContext``, most severe first.

A rule is a *detection* (``detect_<rule>(context) -> evidence | None``, typed evidence
defined beside it) joined to its *wording* (``word_<evidence>``, registered with
``collector.findings.base.words``), all three side by side in the family's module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collector.analysis.epochs import (
    EpochReport,
)
from collector.findings.base import (
    CRITICAL,
    INFO,
    SEVERITY_ORDER,
    WARNING,
    Finding,
    words,
)
from collector.findings.cache import (
    detect_cache_warmup,
    detect_dataset_cached_before_run,
    detect_dataset_evicted,
    detect_dataset_fits_in_memory,
)
from collector.findings.contention import cpu_oversubscription, detect_contention
from collector.findings.context import RunContext, complete_epochs, run_context
from collector.findings.input import (
    accelerator_utilisation,
    detect_epoch_restart,
    detect_input_bound,
    input_wait,
    startup,
)
from collector.findings.learning import detect_divergence, detect_not_learning
from collector.findings.scaling import detect_extra_epochs_to_target, detect_scaling_loss
from collector.findings.storage import (
    detect_fabric_carries_storage,
    detect_precision_read_demand,
    detect_storage_bound,
)
from collector.findings.stragglers import straggler
from collector.store.api import ReadStore

__all__ = [  # what other modules take from here (the severities and Finding re-exported)
    "CRITICAL",
    "INFO",
    "WARNING",
    "Finding",
    "RunContext",
    "complete_epochs",
    "run_context",
    "run_findings",
]

# --------------------------------------------------------------------------------------
# engine
# --------------------------------------------------------------------------------------

Rule = Callable[[RunContext], list[Finding]]
# -> one rule's evidence (defined beside it in its family's module), or None
Detector = Callable[[RunContext], Any]


def rule(detect: Detector, name: str) -> Rule:
    """The rule that words what ``detect`` finds (``collector.findings.base.words``)."""

    def run(context: RunContext) -> list[Finding]:
        found = detect(context)
        return [] if found is None else [words(found)]

    run.__name__ = run.__qualname__ = name
    run.__doc__ = detect.__doc__
    return run


DETECTORS: dict[str, Detector] = {
    "cache_warmup": detect_cache_warmup,
    "dataset_cached_before_run": detect_dataset_cached_before_run,
    "dataset_fits_in_memory": detect_dataset_fits_in_memory,
    "dataset_evicted": detect_dataset_evicted,
    "fabric_carries_storage": detect_fabric_carries_storage,
    "storage_bound": detect_storage_bound,
    "input_bound": detect_input_bound,
    "epoch_restart": detect_epoch_restart,
    "scaling_loss": detect_scaling_loss,
    "precision_read_demand": detect_precision_read_demand,
    "contention": detect_contention,
    "divergence": detect_divergence,
    "not_learning": detect_not_learning,
    "extra_epochs_to_target": detect_extra_epochs_to_target,
}
# each rule by its name, in the order they run (among equal severities, the output's order)
RULES: tuple[Rule, ...] = tuple(rule(detect, name) for name, detect in DETECTORS.items())


# the step-anatomy rules (per rank) and the named causes, after the rules above
ANATOMY_RULES: tuple[Rule, ...] = (input_wait, accelerator_utilisation, straggler, startup)
CAUSE_RULES: tuple[Rule, ...] = (cpu_oversubscription,)


def all_rules() -> tuple[Rule, ...]:
    """These rules, the step-anatomy rules and the named causes."""
    return (*RULES, *ANATOMY_RULES, *CAUSE_RULES)


def evaluate(context: RunContext, rules: tuple[Rule, ...] | None = None) -> list[Finding]:
    rules = all_rules() if rules is None else rules
    findings = [finding for rule in rules for finding in rule(context)]
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def run_findings(
    store: ReadStore,
    run_id: str,
    report: EpochReport | None = None,
    reports: Callable[[str], EpochReport] | None = None,
) -> list[Finding]:
    """Every rule's findings for a run, most severe first. ``report`` is the run's own
    report and ``reports`` gives other runs' (both built here when not given)."""
    return evaluate(run_context(store, run_id, report, reports))
