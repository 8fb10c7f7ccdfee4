"""Prepare, on the Ansible controller, the one file every node gets: a tar of the epochscope
wheel and (optionally) the wheels of all its dependencies.

Usage:
  build_wheel.py wheel SOURCE_DIR OUT_DIR
      Build the epochscope wheel from a checkout; prints its path.
  build_wheel.py bundle OUT_DIR (--source DIR | --wheel FILE) [--wheelhouse DIR]
                 [--download CACHE_ROOT [--extras a,b] [--pip-arg ARG ...]]
      Pack OUT_DIR/epochscope-bundle.tar; prints JSON {"bundle", "sha256", "wheel",
      "offline"}. "offline" is true when the tar holds every dependency (--wheelhouse or
      --download), so the node installs with --no-index.

The checkout is copied before building (without VCS data, virtual environments and build
leftovers), so the build never writes into it and a stale ``build/`` directory cannot add
files that no longer exist. SOURCE_DATE_EPOCH pins the timestamps inside the wheel, and the
tar has sorted names, fixed times and owners: the same sources give the same bytes, so a
node only sees a change (and reinstalls) when the code or a dependency changed.

--download fills a wheelhouse with ``pip download`` (from the controller's package index or
pip's cache) under CACHE_ROOT, in a directory named after what it holds (the wheel's
requirements, the extras, the pip arguments, this Python and CPU): later runs, and every
playbook run of the same code, reuse it without asking the index again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import zipfile
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
BUNDLE_NAME = "epochscope-bundle.tar"
PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def build_wheel(source: Path, out_dir: Path) -> Path:
    if not (source / "pyproject.toml").is_file():
        raise SystemExit(f"{source} is not an epochscope checkout (no pyproject.toml)")
    copy = out_dir / "src"
    shutil.copytree(source, copy, ignore=IGNORED)
    env = dict(os.environ, SOURCE_DATE_EPOCH=REPRODUCIBLE_EPOCH, **PIP_ENV)
    wheel_dir = out_dir / "wheel"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    subprocess.run([*pip_wheel, "--wheel-dir", wheel_dir, copy], check=True, env=env)
    shutil.rmtree(copy)
    wheels = sorted(wheel_dir.glob("epochscope-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one epochscope wheel in {wheel_dir}, found {wheels}")
    return wheels[0]


def wheel_requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise SystemExit(f"{wheel} has no single .dist-info/METADATA")
        metadata = archive.read(names[0]).decode()
    return sorted(
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    )


def wheelhouse_key(wheel: Path, extras: list[str], pip_args: list[str]) -> str:
    what = {
        "requires": wheel_requirements(wheel),
        "extras": sorted(extras),
        "pip_args": pip_args,
        "python": list(sys.version_info[:2]),
        "machine": platform.machine(),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def download_wheelhouse(
    wheel: Path, extras: list[str], cache_root: Path, pip_args: list[str]
) -> Path:
    """Wheels of every dependency of ``wheel[extras]``, downloaded once into the cache."""
    wheelhouse = cache_root / f"wheelhouse-{wheelhouse_key(wheel, extras, pip_args)}"
    if wheelhouse.is_dir():
        return wheelhouse
    cache_root.mkdir(parents=True, exist_ok=True)
    # Filled next to its final name and renamed at the end: an interrupted download never
    # passes for a complete wheelhouse.
    partial = cache_root / f"{wheelhouse.name}.partial-{os.getpid()}"
    requirement = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    pip_download = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
    try:
        subprocess.run(
            [*pip_download, "--dest", partial, *pip_args, requirement],
            check=True,
            env=dict(os.environ, **PIP_ENV),
        )
        # pip copies the requested wheel too; the bundle carries its own.
        for own in partial.glob("epochscope-*.whl"):
            own.unlink()
        partial.rename(wheelhouse)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return wheelhouse


def pack_bundle(wheel: Path, wheelhouse: Path | None, out_dir: Path) -> Path:
    """One uncompressed tar, byte-identical for the same wheels: the epochscope wheel and
    the wheelhouse's wheels (other than any epochscope wheel it may hold)."""
    wheels = [wheel]
    if wheelhouse is not None:
        dependencies = [w for w in wheelhouse.glob("*.whl") if not w.name.startswith("epochscope-")]
        if not dependencies:
            raise SystemExit(f"no dependency wheels in {wheelhouse}")
        wheels += dependencies
    tar_path = out_dir / BUNDLE_NAME
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(wheels, key=lambda w: w.name):
            info = tar.gettarinfo(path, arcname=path.name)
            info.mtime = int(REPRODUCIBLE_EPOCH)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return tar_path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle(args: argparse.Namespace) -> dict:
    out_dir = Path(args.out_dir)
    wheel = Path(args.wheel) if args.wheel else build_wheel(Path(args.source).resolve(), out_dir)
    if not wheel.is_file():
        raise SystemExit(f"no wheel at {wheel}")
    wheelhouse = Path(args.wheelhouse) if args.wheelhouse else None
    if wheelhouse is None and args.download:
        extras = [e for e in args.extras.split(",") if e]
        wheelhouse = download_wheelhouse(wheel, extras, Path(args.download), args.pip_arg)
    tar_path = pack_bundle(wheel, wheelhouse, out_dir)
    return {
        "bundle": str(tar_path),
        "sha256": sha256_of(tar_path),
        "wheel": wheel.name,
        "offline": wheelhouse is not None,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    wheel = commands.add_parser("wheel", help="build the epochscope wheel")
    wheel.add_argument("source")
    wheel.add_argument("out_dir")
    packed = commands.add_parser("bundle", help="pack the tar copied to every node")
    packed.add_argument("out_dir")
    origin = packed.add_mutually_exclusive_group(required=True)
    origin.add_argument("--source", help="checkout to build the wheel from")
    origin.add_argument("--wheel", help="a wheel built already")
    packed.add_argument("--wheelhouse", help="directory of dependency wheels")
    packed.add_argument("--download", metavar="CACHE_ROOT", help="pip download them into here")
    packed.add_argument("--extras", default="", help="comma-separated extras to download for")
    packed.add_argument("--pip-arg", action="append", default=[], help="for pip download")
    args = parser.parse_args(argv)
    if args.command == "wheel":
        print(build_wheel(Path(args.source).resolve(), Path(args.out_dir)))
    else:
        print(json.dumps(bundle(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
