"""What ``workloads profile`` tells the processes of the command (environment variables).

The collector token never travels here: only the path of a 0600 file holding it
(``workloads.record.spec.TOKEN_FILE_ENV``), as for the bundled runs.

``EPOCHSCOPE_PROFILE_RUN`` holds the run as JSON, or (``encode_safe``, what the Slurm
TaskProlog exports) as URL-safe base64 of that JSON: Slurm takes a TaskProlog's ``export
NAME=value`` literally, quotes included, so a value must need no shell quoting.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

RUN_ENV = "EPOCHSCOPE_PROFILE_RUN"  # JSON ProfileConfig; absent: not profiling


@dataclass(frozen=True)
class ProfileConfig:
    run_id: str
    collector_url: str
    spool_root: str
    step_every: int = 10
    data_format: str | None = None  # of --data-dir
    dataset_images: int | None = None
    dataset_bytes: int | None = None
    data_dir: str | None = None  # its page-cache residency goes with run_start and epoch_end
    target_top1: float | None = None  # the top-1 the user aims for (time to accuracy)

    def encode(self) -> str:
        return json.dumps(asdict(self))

    def encode_safe(self) -> str:
        """``encode`` in letters, digits, ``-``, ``_`` and ``=``: a value ``shlex.quote``
        leaves as it is."""
        return base64.urlsafe_b64encode(self.encode().encode()).decode()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ProfileConfig | None:
        text = (os.environ if environ is None else environ).get(RUN_ENV)
        if not text:
            return None
        text = text.strip()
        if not text.startswith("{"):
            text = base64.urlsafe_b64decode(text.encode()).decode()
        return cls(**json.loads(text))

    def spool_dir(self, rank: int) -> Path:
        return Path(self.spool_root) / f"rank{rank}-pid{os.getpid()}"


def site_dir() -> Path:
    """The directory whose ``sitecustomize.py`` instruments a process."""
    return Path(__file__).resolve().parent / "site"
