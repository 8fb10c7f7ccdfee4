"""Tell epochscope about a training loop that nothing recognises: two calls, no setup.

    from workloads import track

    for epoch in range(epochs):
        with track.epoch():
            for batch in my_reader():
                loss = train_step(batch)
                track.step(images=len(batch), loss=loss)
            track.accuracy(top1=evaluate())      # optional, inside the epoch

``track.run(model=..., batch_size=..., framework=...)`` names the run before the first
epoch (else: model "unknown", framework "custom"). Outside ``workloads profile -- ...``
every call does nothing, so the script runs unchanged without it. Once a script calls
``track``, the automatic PyTorch recognition of that process stands aside (its epochs
are the ones given here), so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from workloads.autoprofile import session as sessions


def _session(framework: str = "custom", model: str | None = None,
             batch_size: int | None = None) -> sessions.Session | None:  # fmt: skip
    session = sessions.current()
    if session is None:
        return None
    session.driver = "track"
    session.start(framework, model, batch_size)
    return session


def run(model: str | None = None, batch_size: int | None = None,
        framework: str = "custom") -> None:  # fmt: skip
    """Name this process's run (before its first epoch)."""
    _session(framework, model, batch_size)


@contextmanager
def epoch() -> Iterator[None]:
    """One epoch: from entering the block to leaving it."""
    session = _session()
    if session is None:
        yield
        return
    session.epoch_start()
    try:
        yield
    finally:
        session.epoch_end(now=True)


def step(images: int, loss: float | None = None, input_wait: float | None = None) -> None:
    """One training step ended now, on ``images`` images (``input_wait``: seconds of it
    spent waiting for them, if known)."""
    session = _session()
    if session is not None:
        session.step(int(images), input_wait, loss)


def accuracy(top1: float | None = None, top5: float | None = None) -> None:
    """The validation accuracy (0..1) of the open epoch."""
    session = _session()
    if session is not None and session.epoch is not None:
        session.epoch.top1, session.epoch.top5 = top1, top5
