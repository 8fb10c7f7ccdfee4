"""Today's words for the scaling losses recorded by ``real_runs.py``, from their evidence.

    python bench/anatomy/reword.py [bench/anatomy/results/real-runs.json]

``real_runs.py`` keeps each run's ``epoch_end`` events and the anatomy's attribution of
its scaling loss as evidence (the stores themselves live in a temporary directory). This
rebuilds the one ``scaling_loss`` finding of each 2-process run from that record with
today's code: the run's and the 1-process run's images/s by the one throughput rule
(``contract.throughput``, each rank's timed images over its timed seconds, summed over
ranks), the efficiency by ``collector.analysis.scaling.scaling_row``, the recorded attribution
unchanged, and the words of ``collector.findings.words``. Used to keep the README's and
docs' quoted findings in today's wording without training again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from collector.analysis.scaling import scaling_row  # noqa: E402
from collector.findings.evidence import PartChange, ScalingAttribution, ScalingLoss  # noqa: E402
from collector.findings.words import words  # noqa: E402
from contract.throughput import TimedWork, images_per_second  # noqa: E402

RECORDED = ROOT / "bench" / "anatomy" / "results" / "real-runs.json"


def run_rate(epoch_ends: list[dict]) -> float | None:
    return images_per_second(
        (end["rank"], TimedWork(end["timed_images"], end["timed_seconds"])) for end in epoch_ends
    )


def reworded(runs: dict[str, dict], run_id: str) -> str | None:
    run = runs[run_id]
    recorded = [
        f for f in run["findings"] if f["rule"] in ("scaling_loss", "scaling_loss_attributed")
    ]
    if not recorded:
        return None
    evidence = dict(recorded[0]["evidence"])
    evidence = evidence.get("attribution", evidence)  # today's record nests it
    parts = [PartChange(**part) for part in evidence.pop("parts")]
    attribution = ScalingAttribution(parts=parts, **evidence)
    reference = runs[attribution.reference_run]
    row = scaling_row(
        run["processes"], 1, run_rate(run["epoch_end"]), run_rate(reference["epoch_end"])
    )
    found = ScalingLoss(
        gpus=row.gpus,
        nodes=row.nodes,
        images_per_second=row.images_per_second,
        ideal=row.ideal,
        efficiency_percent=row.efficiency_percent,
        scope=row.scope,
        reference_run=attribution.reference_run,
        reference_gpus=reference["processes"],
        reference_nodes=1,
        attribution=attribution,
        on_gpus=False,  # CPU processes on the development machine
    )
    finding = words(found)
    return f"{finding.severity.upper()} {finding.title}\n  {finding.explanation}"


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else RECORDED
    runs = json.loads(path.read_text())["runs"]
    for run_id in runs:
        text = reworded(runs, run_id)
        if text is not None:
            print(f"{run_id}:\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
