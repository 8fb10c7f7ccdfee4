"""A FUSE file system over a backing directory whose reads or writes fail with EIO on demand.

``python -m tests.support.faulty_fs BACKING MOUNTPOINT CONTROL`` mounts BACKING at
MOUNTPOINT (in the foreground, until unmounted). While the file ``CONTROL/write`` exists,
every write, fsync and truncate fails with ``EIO``; while ``CONTROL/read`` exists, every read
does. A control file that holds a name limits the fault to the files of that name (a bad
sector under one file). The errors come back from the kernel to the process using the
mount, as a failing disk's do; device-mapper's ``error`` and ``flakey`` targets (the usual
way) are not in this machine's kernel, FUSE is. ``direct_io``: every read reaches this
process, none is served from the page cache (``cached`` as a 4th argument keeps the page
cache, for SQLite's shared memory map).

Needs fusepy and libfuse2 (``make system-packages``), and root to mount.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from fuse import FUSE, FuseOSError, Operations


class FaultyPassthrough(Operations):
    def __init__(self, backing: Path, control: Path) -> None:
        self.backing = backing
        self.control = control

    def _path(self, path: str) -> str:
        return str(self.backing / path.lstrip("/"))

    def _fail_if(self, operation: str, path: str) -> None:
        try:
            only = (self.control / operation).read_text().strip()
        except FileNotFoundError:
            return
        if not only or Path(path).name == only:
            raise FuseOSError(errno.EIO)

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")
        times = ("st_atime", "st_mtime", "st_ctime")
        return {key: getattr(st, key) for key in keys + times}

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._path(path))]

    def access(self, path, amode):
        if not os.access(self._path(path), amode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._path(path), uid, gid)

    def mkdir(self, path, mode):
        os.mkdir(self._path(path), mode)

    def rmdir(self, path):
        os.rmdir(self._path(path))

    def unlink(self, path):
        os.unlink(self._path(path))

    def rename(self, old, new):
        os.rename(self._path(old), self._path(new))

    def utimens(self, path, times=None):
        os.utime(self._path(path), times)

    def statfs(self, path):
        st = os.statvfs(self._path(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        return {key: getattr(st, key) for key in (*keys, "f_flag", "f_frsize", "f_namemax")}

    def open(self, path, flags):
        return os.open(self._path(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT, mode)  # mmap reads too

    def read(self, path, size, offset, fh):
        self._fail_if("read", path)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self._fail_if("write", path)
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        self._fail_if("write", path)
        os.truncate(self._path(path), length)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        self._fail_if("write", path)
        os.fsync(fh)

    def fsyncdir(self, path, datasync, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)


def main() -> None:
    backing, mountpoint, control = (Path(arg) for arg in sys.argv[1:4])
    # "cached" (a 4th argument): the page cache kept, as SQLite's shared memory map needs
    # (writes still reach this process at once; reads may not).
    cached = {"attr_timeout": 0, "entry_timeout": 0}  # sizes fresh for mmap
    options = cached if sys.argv[4:5] == ["cached"] else {"direct_io": True}
    FUSE(
        FaultyPassthrough(backing, control),
        str(mountpoint),
        foreground=True,
        nothreads=True,
        **options,
    )


if __name__ == "__main__":
    main()
