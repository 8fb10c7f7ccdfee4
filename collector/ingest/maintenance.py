"""The store's background work beside ``collector serve``'s writes: WAL checkpoints,
folding new points into blocks, retention."""

from __future__ import annotations

import logging
import threading
import time

from collector.store import SqliteStore

log = logging.getLogger("collector.ingest.server")  # one logger name for the whole server
COMPACT_SECONDS = 30.0
CHECKPOINT_SECONDS = 1.0  # how often the WAL is copied into the store file
RETENTION_SECONDS = 3600.0  # how often retention runs


class Checkpointer(threading.Thread):
    """Copies the store's WAL into its file every ``CHECKPOINT_SECONDS``, beside the writes
    (a commit that checkpointed itself held every writer for the copy and its fsync: the
    30 s fold's commit took 0.8 s of its 2 s under the write lock that way)."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(name="store-checkpoint", daemon=True)
        self.store = store
        self.stopping = threading.Event()

    def run(self) -> None:
        failing = ""  # logged once while it lasts (a full disk fails it every second)
        while not self.stopping.wait(CHECKPOINT_SECONDS):
            try:
                self.store.checkpoint()
            except Exception as error:
                if str(error) != failing:
                    failing = str(error)
                    log.warning("store checkpoint failed: %s (the WAL grows meanwhile)", error)
                continue
            if failing:
                failing = ""
                log.info("store checkpoint works again")


class Maintenance(threading.Thread):
    """Compacts small blocks and applies retention in the background."""

    def __init__(self, store: SqliteStore, retention_days: float | None) -> None:
        super().__init__(name="store-maintenance", daemon=True)
        self.store = store
        self.retention_days = retention_days
        self.stopping = threading.Event()

    def run(self) -> None:
        last_retention = 0.0
        while not self.stopping.wait(COMPACT_SECONDS):
            try:
                self.store.compact()
                now = time.monotonic()
                if self.retention_days is not None and now - last_retention >= RETENTION_SECONDS:
                    last_retention = now
                    cutoff = time.time_ns() - int(self.retention_days * 86400e9)
                    dropped = self.store.delete_before(cutoff)
                    if dropped:
                        log.info("retention: dropped %d blocks", dropped)
            except Exception:
                log.exception("store maintenance failed")
