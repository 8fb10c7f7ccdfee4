"""Post-import hooks: patch a framework's module right after the script imports it.

Nothing heavy is imported here: a process that never imports torch or Keras runs as if
unprofiled, apart from one entry on ``sys.meta_path``. Not even ``importlib.abc``,
``importlib.util``, ``threading`` or ``typing`` (together 30-60 ms on a loaded node:
``importlib.abc`` pulls in ``importlib.resources``, ``pathlib`` and ``tempfile``):
``sys.meta_path`` takes any object with ``find_spec``, and ``importlib.util`` is imported
once a watched module is.
"""

from __future__ import annotations

import sys
from _thread import _local  # threading.local, without importing threading (~20 ms loaded)

TYPE_CHECKING = False  # typing's, without importing typing (and re) at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    Patch = Callable[[ModuleType], None]


def _torch_dataloader(module: ModuleType) -> None:
    from workloads.autoprofile import torch_hooks

    torch_hooks.patch_dataloader(module)


def _torch_optimizer(module: ModuleType) -> None:
    from workloads.autoprofile import torch_hooks

    torch_hooks.patch_optimizer(module)


def _torch_tensor(module: ModuleType) -> None:
    from workloads.autoprofile import torch_hooks

    torch_hooks.patch_backward(module)


def _torch_ddp(module: ModuleType) -> None:
    from workloads.autoprofile import torch_hooks

    torch_hooks.patch_distributed_data_parallel(module)


def _lightning_trainer(module: ModuleType) -> None:
    from workloads.autoprofile import lightning_hooks

    lightning_hooks.patch_trainer(module)


def _keras_training(module: ModuleType) -> None:
    from workloads.autoprofile import keras_hooks

    keras_hooks.patch_fit(module)


def _dlio_torch_framework(module: ModuleType) -> None:
    from workloads.autoprofile import dlio_hooks

    dlio_hooks.patch_torch_framework(module)


def _dlio_benchmark(module: ModuleType) -> None:
    from workloads.autoprofile import dlio_hooks

    dlio_hooks.patch_benchmark(module)


PATCHES: dict[str, Patch] = {
    "torch.utils.data.dataloader": _torch_dataloader,
    "torch.optim.optimizer": _torch_optimizer,
    "torch._tensor": _torch_tensor,
    "torch.nn.parallel.distributed": _torch_ddp,
    "lightning.pytorch.trainer.trainer": _lightning_trainer,  # Lightning 2.x
    "pytorch_lightning.trainer.trainer": _lightning_trainer,
    "keras.src.engine.training": _keras_training,  # Keras 2.13-2.15 (TF 2.13-2.15)
    "keras.engine.training": _keras_training,  # Keras 2.6-2.12
    "tf_keras.src.engine.training": _keras_training,  # Keras 2 beside TF >= 2.16
    "dlio_benchmark.framework.torch_framework": _dlio_torch_framework,  # DLIO 2.0
    "dlio_benchmark.main": _dlio_benchmark,
}


class PostImportFinder:
    """Finds nothing itself: wraps the real loader of a watched module so its patch runs
    once the module has executed."""

    def __init__(self, patches: dict[str, Patch]) -> None:
        self.patches = patches
        self._finding = _local()

    def find_spec(self, name, path, target=None):
        patch = self.patches.get(name)
        busy = getattr(self._finding, "names", None)
        if busy is None:
            busy = self._finding.names = set()
        if patch is None or name in busy:
            return None
        import importlib.util  # only once a watched module is imported

        busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            try:
                patch(module)
            except Exception as error:  # the script goes on, unprofiled in this part
                print(f"epochscope: could not instrument {name}: {error!r}", file=sys.stderr)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    sys.meta_path.insert(0, PostImportFinder(PATCHES))
