"""DLIO (``dlio_benchmark``, 2.0): its emulated training step, seen as a PyTorch step.

DLIO emulates a training: its loop (``DLIOBenchmark._train``) draws each batch from its
data loader and then calls the framework's ``compute(batch, epoch, step, seconds)``, which
sleeps for the configured computation time in place of the accelerator's work; there is no
model, no ``backward`` and no optimizer, so the PyTorch hooks see its loader's passes but
no step. With DLIO's PyTorch data loader (``reader.data_loader: pytorch``, a
``torch.utils.data.DataLoader``) ``TorchFramework.compute`` returning is the step's end,
the step's compute runs from its batch's arrival until the configured sleep was done, and
the accelerator's work (for AU) is exactly that configured time, as DLIO counts it: the
sleep's overshoot on a busy host and DLIO's bookkeeping between batches are the
accelerator's idle time (``Tracker.emulated_step``). Input wait, passes and epochs are the
PyTorch hooks' own. The model is named after DLIO's
workload (``dlio-resnet50``). Its evaluation (``DLIOBenchmark._eval``, run as the
``dlio_benchmark`` command runs it) calls ``compute`` too: those are no training steps, and
its loader's pass is the epoch's validation, as in any PyTorch loop. DLIO leaves its loader
before ``StopIteration`` (it stops at its step count), so an epoch ends at its last step.
Its TensorFlow and DALI loaders are not PyTorch passes: their steps are not seen.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType

from workloads.autoprofile.torch_hooks import TRACKER

_evaluating = threading.local()


def workload_model() -> str | None:
    """DLIO's workload name (its config's ``model``) as ``dlio-<model>``."""
    import sys

    config = sys.modules.get("dlio_benchmark.utils.config")
    arguments = getattr(config, "ConfigArguments", None)
    try:
        model = arguments.get_instance().model if arguments is not None else None
    except Exception:
        return None
    return f"dlio-{model}" if model else None


def patch_torch_framework(module: ModuleType) -> None:
    framework_class = module.TorchFramework
    original = framework_class.compute

    def compute(self, x, epoch_number, step, computation_time, *args, **kwargs):
        started = time.perf_counter()
        result = original(self, x, epoch_number, step, computation_time, *args, **kwargs)
        if getattr(_evaluating, "on", False):
            return result
        if TRACKER.model is None:
            TRACKER.model = workload_model()
        TRACKER.emulated_step(started, float(computation_time))
        return result

    framework_class.compute = compute


def patch_benchmark(module: ModuleType) -> None:
    benchmark_class = module.DLIOBenchmark
    original = benchmark_class._eval

    def _eval(self, *args, **kwargs):
        _evaluating.on = True
        try:
            return original(self, *args, **kwargs)
        finally:
            _evaluating.on = False

    benchmark_class._eval = _eval
