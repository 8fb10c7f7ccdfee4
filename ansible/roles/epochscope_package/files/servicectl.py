#!/usr/bin/env python3
"""Start, stop and query one epochscope daemon where no service manager runs (containers).

Usage: epochscope-servicectl SPEC.json {start|stop|restart|status}

SPEC is a JSON object written by the Ansible role:
  name          label used in messages
  argv          the command, an argument list (never a shell string)
  pidfile       where the daemon's pid is kept
  logfile       stdout and stderr of the daemon are appended here
  user, group   run as this account when started as root (optional)
  workdir       working directory (default /)
  env           extra environment variables (default none)
  stop_timeout  seconds between SIGTERM and SIGKILL (default 30)

Every command is idempotent and prints one line that starts with what it did: ``started``,
``already running``, ``stopped``, ``not running``, ``restarted``. ``status`` exits 0 when
running and 3 when not (as LSB init scripts do); anything that fails exits 1.

The pidfile holds the pid and, on its second line, the argument list it was started with. A
pid only counts as the daemon's while /proc/PID/cmdline still equals that list, so a stale
pidfile whose pid was reused by another process is never signalled, and a daemon started
with an older spec is still found (and stopped) after the spec changed.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import sys
import time
from pathlib import Path

STARTUP_GRACE_SECONDS = 1.0
POLL_SECONDS = 0.05


def load_spec(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    if not isinstance(spec.get("argv"), list) or not spec["argv"]:
        raise SystemExit(f"{path}: 'argv' must be a non-empty list")
    return spec


def cmdline_of(pid: int) -> list[str] | None:
    """The process's arguments, or None when it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if not raw:  # zombies and kernel threads have an empty cmdline
        return None
    return raw.rstrip(b"\0").decode(errors="replace").split("\0")


def read_pidfile(path: str) -> tuple[int, list[str]] | None:
    """(pid, argv it was started with), or None when missing or unreadable."""
    try:
        lines = Path(path).read_text().splitlines()
        return int(lines[0]), json.loads(lines[1])
    except (OSError, ValueError, IndexError):
        return None


def running(spec: dict) -> tuple[int, list[str]] | None:
    """The daemon's (pid, argv) when it is alive."""
    recorded = read_pidfile(spec["pidfile"])
    if recorded is None or cmdline_of(recorded[0]) != recorded[1]:
        return None
    return recorded


def write_pidfile(path: Path, pid: int, argv: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{pid}\n{json.dumps(argv)}\n")
    tmp.rename(path)


def remove_pidfile(spec: dict) -> None:
    Path(spec["pidfile"]).unlink(missing_ok=True)


def tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def open_log(spec: dict, account: pwd.struct_passwd | None) -> int:
    log = Path(spec["logfile"])
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    if account is not None:
        os.fchown(fd, account.pw_uid, account.pw_gid)
    return fd


def account_of(spec: dict) -> pwd.struct_passwd | None:
    """The account to switch to, or None when staying who we are."""
    user = spec.get("user")
    if not user or os.geteuid() != 0:
        return None
    return pwd.getpwnam(user)


def become(account: pwd.struct_passwd, group: str | None) -> None:
    import grp

    gid = grp.getgrnam(group).gr_gid if group else account.pw_gid
    os.setgroups([])
    os.initgroups(account.pw_name, gid)
    os.setgid(gid)
    os.setuid(account.pw_uid)


def child_environment(spec: dict, account: pwd.struct_passwd | None) -> dict[str, str]:
    home = account.pw_dir if account else os.environ.get("HOME", "/")
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({str(k): str(v) for k, v in spec.get("env", {}).items()})
    return env


def spawn(spec: dict) -> int:
    """Double-fork the daemon into its own session; return its pid once exec succeeded."""
    account = account_of(spec)
    log_fd = open_log(spec, account)
    env = child_environment(spec, account)
    report_r, report_w = os.pipe()
    first = os.fork()
    if first == 0:  # intermediate child: new session, then fork again and leave
        try:
            os.close(report_r)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.set_inheritable(report_w, False)
            os.write(report_w, f"{os.getpid()}\n".encode())
            os.chdir(spec.get("workdir", "/"))
            os.umask(0o027)
            if account is not None:
                become(account, spec.get("group"))
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.closerange(3, report_w)
            os.closerange(report_w + 1, 65536)
            os.execve(spec["argv"][0], spec["argv"], env)
        except BaseException as exc:  # report why exec failed, then vanish
            try:
                os.write(report_w, f"error: {exc}\n".encode())
            finally:
                os._exit(127)
    os.close(report_w)
    os.close(log_fd)
    os.waitpid(first, 0)
    chunks = []
    while chunk := os.read(report_r, 4096):
        chunks.append(chunk)
    os.close(report_r)
    lines = b"".join(chunks).decode(errors="replace").splitlines()
    if not lines:
        raise SystemExit(f"{spec['name']}: the daemon process vanished before exec")
    if len(lines) > 1:
        raise SystemExit(f"{spec['name']}: could not start {spec['argv'][0]}: {lines[1]}")
    return int(lines[0])


def start(spec: dict) -> str:
    alive = running(spec)
    if alive is not None:
        return f"already running pid {alive[0]}"
    remove_pidfile(spec)
    pid = spawn(spec)
    write_pidfile(Path(spec["pidfile"]), pid, spec["argv"])
    deadline = time.monotonic() + STARTUP_GRACE_SECONDS
    while time.monotonic() < deadline:
        if cmdline_of(pid) != spec["argv"]:
            remove_pidfile(spec)
            raise SystemExit(
                f"{spec['name']} exited right after starting; last lines of "
                f"{spec['logfile']}:\n{tail(spec['logfile'])}"
            )
        time.sleep(POLL_SECONDS)
    return f"started pid {pid}"


def stop(spec: dict) -> str:
    alive = running(spec)
    if alive is None:
        remove_pidfile(spec)
        return "not running"
    pid, argv = alive
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + float(spec.get("stop_timeout", 30))
    while cmdline_of(pid) == argv:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(POLL_SECONDS)
    remove_pidfile(spec)
    return f"stopped pid {pid}"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("start", "stop", "restart", "status"):
        print(__doc__, file=sys.stderr)
        return 2
    spec = load_spec(argv[0])
    spec.setdefault("name", Path(argv[0]).stem)
    action = argv[1]
    try:
        if action == "start":
            print(start(spec))
        elif action == "stop":
            print(stop(spec))
        elif action == "restart":
            stop(spec)
            print("restarted " + start(spec).removeprefix("started "))
        else:
            alive = running(spec)
            print(f"running pid {alive[0]}" if alive else "not running")
            return 0 if alive else 3
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
