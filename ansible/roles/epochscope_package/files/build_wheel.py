"""Build the epochscope wheel from a source checkout, on the Ansible controller.

Usage: build_wheel.py SOURCE_DIR OUT_DIR   (prints the wheel's path)
       build_wheel.py --pack-wheelhouse WHEELHOUSE_DIR OUT_DIR   (prints the tar's path)

The checkout is copied first (without VCS data, virtual environments and build leftovers)
so the build never writes into it and a stale ``build/`` directory cannot add files that no
longer exist. SOURCE_DATE_EPOCH pins the timestamps inside the wheel: the same sources give
the same bytes, so copying the wheel to a node only reports a change when the code changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "runs",
    ".cache",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    "*.sqlite*",
)
# 1980-01-01, the earliest time a zip file can hold.
REPRODUCIBLE_EPOCH = "315532800"


def build_wheel(source: Path, out_dir: Path) -> Path:
    if not (source / "pyproject.toml").is_file():
        raise SystemExit(f"{source} is not an epochscope checkout (no pyproject.toml)")
    copy = out_dir / "src"
    shutil.copytree(source, copy, ignore=IGNORED)
    env = dict(os.environ, SOURCE_DATE_EPOCH=REPRODUCIBLE_EPOCH, PIP_DISABLE_PIP_VERSION_CHECK="1")
    wheel_dir = out_dir / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            wheel_dir,
            copy,
        ],
        check=True,
        env=env,
    )
    shutil.rmtree(copy)
    wheels = sorted(wheel_dir.glob("epochscope-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one epochscope wheel in {wheel_dir}, found {wheels}")
    return wheels[0]


def pack_wheelhouse(wheelhouse: Path, out_dir: Path) -> Path:
    """One uncompressed tar of the wheelhouse's wheels, byte-identical for the same wheels
    (sorted names, fixed times and owners): one file to copy and compare per node instead
    of one per wheel."""
    wheels = sorted(wheelhouse.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheels in {wheelhouse}")
    tar_path = out_dir / "wheelhouse.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            info = tar.gettarinfo(wheel, arcname=wheel.name)
            info.mtime = int(REPRODUCIBLE_EPOCH)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(wheel, "rb") as f:
                tar.addfile(info, f)
    return tar_path


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--pack-wheelhouse":
        print(pack_wheelhouse(Path(argv[1]), Path(argv[2])))
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(build_wheel(Path(argv[0]).resolve(), Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
