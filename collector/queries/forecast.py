"""A run's forecast as a JSON-ready value: what ``collector forecast --format json`` prints, the
read API's ``forecast`` answers and the dashboard's scaling page draws (docs/forecast.md).

Every figure in it is a forecast: ``label`` and ``forecast_error`` (the error measured on
real runs forecasting from a run of that size, ``collector.analysis.forecast.validation_for``)
go with it, and every row carries ``"forecast": true``; ``measured`` holds what the run
itself measured, apart.
"""

from __future__ import annotations

from typing import Any

from collector.analysis.epochs import build_report
from collector.analysis.forecast import (
    ForecastError,
    forecast,
    measured_run,
    requirements,
    validation_for,
    what_if,
)
from collector.store.api import ReadStore


def forecast_label(error: ForecastError) -> str:
    """The line every forecast goes under: FORECAST and the error measured on real runs."""
    return f"FORECAST (modelled, not measured; {error.text()}; docs/forecast.md)"


DASHBOARD_SIZES = (2, 4, 8, 16)


class NoSuchRun(LookupError):
    pass


def forecast_answer(
    store: ReadStore,
    run_id: str,
    nodes: list[int] | tuple[int, ...] = DASHBOARD_SIZES,
    *,
    gradient_bytes: float | None = None,
    link_bytes_per_second: float | None = None,
    link_from_ceilings: bool = False,
    storage_bytes_per_second: float | None = None,
    storage_from_ceilings: bool = False,
    gpus_per_node: int | None = None,
) -> dict[str, Any]:
    """The forecast at ``nodes``; ``NoSuchRun`` for a run the store lacks, ``ValueError``
    (saying what to give) where the run cannot be forecast."""
    report = build_report(store, run_id)
    if not report.model.records:
        raise NoSuchRun(f"no run {run_id} in the store")
    run = measured_run(
        report,
        gradient_bytes=gradient_bytes,
        link_bytes_per_second=link_bytes_per_second,
        link_from_ceilings=link_from_ceilings,
        storage_bytes_per_second=storage_bytes_per_second,
        storage_from_ceilings=storage_from_ceilings,
    )
    rows = forecast(run, list(nodes), gpus_per_node)
    error = validation_for(run.nodes)
    return {
        "run_id": run.run_id,
        "label": forecast_label(error),
        "forecast_error": error.to_dict(),
        "measured": {
            "nodes": run.nodes,
            "gpus_per_node": run.gpus_per_node,
            "images_per_second": run.images_per_second,
            "per_rank_images_per_second": run.per_rank_rate,
            "step": {
                "input_wait": run.step.input_wait,
                "compute": run.step.compute,
                "communication": run.step.communication,
                "other": run.step.other,
                "hidden": run.step.hidden,
            },
            "overlap_share": run.step.overlap_share if run.overlap_measured else None,
            "gradient_bytes": run.gradient_bytes,
            "gradient_source": run.gradient_source,
            "link_bytes_per_second": run.link_bytes_per_second,
            "link_source": run.link_source,
            "storage_bytes_per_second": run.storage_bytes_per_second,
            "storage_source": run.storage_source,
            "epoch1_storage_bytes_per_second": run.epoch1_storage_bytes_per_second,
            "storage_fabric_bytes_per_image": run.storage_fabric_bytes_per_image,
            "dataset_bytes": run.dataset_bytes,
            "host_memory_bytes": run.host_memory_bytes,
            "memory_limit_bytes": run.memory_limit_bytes,
        },
        "forecast": [row.to_dict() for row in rows],
        "requirements": requirements(run, rows),
        "what_if": [fix.to_dict() for fix in what_if(report)],
    }


def dashboard_forecast(store: ReadStore, run_id: str) -> dict[str, Any] | None:
    """The scaling page's forecast of ``run_id`` at 2, 4, 8 and 16 nodes from what the run
    measured (the link from its own all-reduce, else the agents' measured fabric ceiling);
    ``{"run_id", "label", "forecast_error", "error"}`` saying why where it cannot be made;
    None for a run the store lacks."""
    try:
        try:
            return forecast_answer(store, run_id)
        except ValueError:
            return forecast_answer(store, run_id, link_from_ceilings=True)
    except NoSuchRun:
        return None
    except ValueError as error:
        validated = validation_for(1)  # only a 1-node run lacks what a forecast needs
        return {
            "run_id": run_id,
            "label": forecast_label(validated),
            "forecast_error": validated.to_dict(),
            "error": str(error),
        }
