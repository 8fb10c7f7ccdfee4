"""The embedded store: one SQLite file (WAL) holding samples as column blocks, and events.

One job per module:

``database``  the file: table definitions, migrations, connections, the one transaction
              helper, the integrity check
``blocks``    pure block algebra over numpy columns: gather, merge, window, cut
``samples``   samples: write batches, compaction, retention, reads (``SampleStore``)
``events``    workload events, runs, steps and the run state rules (``EventStore``), which
              the VictoriaMetrics and Prometheus stores use directly
``sqlite``    ``SqliteStore``: samples and events of one file, the embedded ``ReadStore``

SQL lives in this package only.
"""

from collector.store.blocks import CHUNK_NS
from collector.store.database import SCHEMA_VERSION, Database, StoreError
from collector.store.events import EventStore
from collector.store.samples import SampleStore
from collector.store.sqlite import SqliteStore, WriteResult

__all__ = [
    "CHUNK_NS",
    "SCHEMA_VERSION",
    "Database",
    "EventStore",
    "SampleStore",
    "SqliteStore",
    "StoreError",
    "WriteResult",
]
