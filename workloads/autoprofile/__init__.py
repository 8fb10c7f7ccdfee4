"""Instrumentation of an unmodified training script, for ``workloads profile -- COMMAND``.

``workloads profile`` prepends ``site/`` to the command's ``PYTHONPATH`` and names the run
in ``EPOCHSCOPE_PROFILE_*`` variables (``config``). Every Python process the command starts
inherits both, so its ``sitecustomize`` (``site/sitecustomize.py``) runs at start-up:
it installs post-import hooks (``hooks``) and then runs the ``sitecustomize`` it shadows.
The hooks patch a framework only when the script imports it:

- PyTorch (``torch_hooks``): ``DataLoader`` passes, optimizer steps, the loss's
  ``backward``, the model's forward on validation batches;
- Keras 2 (``keras_hooks``): a callback added to every ``Model.fit``;
- PyTorch Lightning (``lightning_hooks``): a callback added to every ``Trainer.fit``;
- DLIO's emulated training (``dlio_hooks``): its ``compute`` sleep ends a PyTorch step.

Both report to the process's ``Session`` (``session``), which becomes a rank, with a
``run_start``, only when a training step is seen: a launcher (torchrun, horovodrun), a
DataLoader worker or any other Python process of the command sends nothing. Scripts whose
loop nothing recognises call ``workloads.track`` themselves.
"""
