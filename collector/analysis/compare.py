"""Two runs side by side: their images/s (the one definition, ``analysis.throughput``), per
epoch, the step anatomy's shares, what changed in their configuration, and one sentence
saying how B compares with A and which part of the step moved most."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from collector.analysis.anatomy import rank_epochs
from collector.analysis.run import RunModel
from collector.analysis.throughput import epoch_rates, rank_epoch_work, run_throughput

# the anatomy's parts, as RankEpoch names them, and as people read them
PARTS = (
    ("input_wait", "input wait"),
    ("compute", "compute"),
    ("communication", "communication"),
    ("other", "the rest"),
)
# run_start fields that say how a run was configured (what changed is listed)
CONFIG_KEYS = (
    "framework",
    "model",
    "batch_size",
    "world_size",
    "local_size",
    "precision",
    "data_format",
    "dataset_images",
    "dataset_bytes",
    "image_size",
    "warmup_steps",
)


@dataclass(frozen=True)
class RunSide:
    run_id: str
    images_per_second: float | None
    epoch_images_per_second: dict[int, float]
    shares: dict[str, float]  # part -> share (0..1) of all ranks' step seconds
    config: dict[str, Any]


@dataclass(frozen=True)
class Comparison:
    a: RunSide
    b: RunSide
    ratio: float | None  # B's images/s over A's
    config_changes: dict[str, tuple[Any, Any]]
    sentence: str

    def slower_percent(self) -> float | None:
        """How much slower B is than A, in percent (negative: faster)."""
        return None if self.ratio is None else (1.0 - self.ratio) * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": asdict(self.a),
            "b": asdict(self.b),
            "ratio": self.ratio,
            "slower_percent": self.slower_percent(),
            "config_changes": {k: list(v) for k, v in self.config_changes.items()},
            "sentence": self.sentence,
        }


def run_side(model: RunModel) -> RunSide:
    works = rank_epoch_work(model)
    _, by_epoch = epoch_rates(works)
    ranks = rank_epochs(model)
    seconds = sum(r.seconds for r in ranks)
    shares = (
        {part: sum(getattr(r, part) for r in ranks) / seconds for part, _ in PARTS}
        if seconds > 0
        else {}
    )
    run_config = dict(model.run.config) if model.run else {}
    if model.run:
        run_config.setdefault("framework", model.run.framework)
        run_config["nodes"] = len(model.run.hosts)
    config = {key: run_config[key] for key in (*CONFIG_KEYS, "nodes") if key in run_config}
    return RunSide(
        model.run_id,
        run_throughput(works).images_per_second,
        dict(sorted(by_epoch.items())),
        shares,
        config,
    )


def compare(a: RunModel, b: RunModel) -> Comparison:
    side_a, side_b = run_side(a), run_side(b)
    ratio = (
        side_b.images_per_second / side_a.images_per_second
        if side_a.images_per_second and side_b.images_per_second
        else None
    )
    changes = {
        key: (side_a.config.get(key), side_b.config.get(key))
        for key in sorted(set(side_a.config) | set(side_b.config))
        if side_a.config.get(key) != side_b.config.get(key)
    }
    return Comparison(side_a, side_b, ratio, changes, _sentence(side_a, side_b, ratio))


def _sentence(a: RunSide, b: RunSide, ratio: float | None) -> str:
    if ratio is None:
        return "B and A cannot be compared: one of them has no timed steps"
    head = f"B is {ratio:.2f}x A"
    moved = [
        (abs(b.shares[part] - a.shares[part]), label, a.shares[part], b.shares[part])
        for part, label in PARTS
        if part in a.shares and part in b.shares
    ]
    if not moved:
        return head
    change, label, before, after = max(moved)
    if change < 0.005:
        return f"{head}: no part of the step moved by half a percentage point"
    verb = "fell" if after < before else "rose"
    return f"{head}: {label} {verb} from {before:.0%} to {after:.0%} of the step"
