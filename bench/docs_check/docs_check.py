"""Re-run the shell commands of README.md and docs/*.md from a fresh clone (``make docs-check``).

Two checks, on every fenced ``bash``/``sh``/``console`` block:

1. **options**: each ``agent``, ``collector``, ``workloads`` or ``dashboard`` command line
   (also as ``python -m X``, after ``VAR=value`` or a ``$`` prompt) names a subcommand and
   options that its ``--help`` lists. Every block is checked, skipped ones too: a command a
   cluster needs still has to be spelled right. Words after a lone ``--`` are the user's
   script's, not ours.
2. **runs**: each block not marked with ``<!-- docs-check: skip (reason) -->`` on a line
   before it is run with ``bash -e`` in a ``git clone`` of the checkout (what is committed:
   what a new user gets), in the documents' order (README.md first: its ``make demo`` makes
   the run and data set the later blocks read), with the checkout's ``.venv/bin`` first on
   ``PATH`` and the clone first on ``PYTHONPATH`` (so the clone's code runs, not the
   editable install's), each block under ``--timeout`` seconds.

Marks on the lines just before a block's fence, one or more ``<!-- docs-check: ... -->``:

- ``skip (why)``: the block is not run (a cluster, a GPU, a placeholder only a user fills);
- ``omit "PREFIX" (why)``: its commands that start with PREFIX are not run, the others are;
- ``fill WORD``: WORD (``RUN_ID``, a past run's id) stands for ``make demo``'s run, the
  newest ``runs/*.sqlite`` of the clone; ``fill WORD=TEXT`` for TEXT, ``{run}`` in it that id;
- ``expect "TEXT"``: the block's output must contain TEXT (a heading, a column);
- ``timeout SECONDS``: this block's limit instead of ``--timeout``.

A command that serves until stopped (``dashboard serve``, ``collector serve``, not sent to
the background with ``&``) is started, must answer HTTP at its address (``--host``/``--port``,
``--listen`` or the defaults) within a minute, and is then stopped with SIGINT (Ctrl-C).

Prints one line per failure (file:line, the command, why) and a summary; exit status 1 when
anything failed. ``--no-run`` does the options check only (no clone, a few seconds a
command family).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = ("bash", "sh", "console", "shell")
MARK = re.compile(r"^\s*<!--\s*docs-check:\s*(?P<body>.*?)\s*-->\s*$")
DIRECTIVE = re.compile(
    r"\s*(?:skip\s*\((?P<skip>[^)]*)\)"
    r'|omit\s+"(?P<omit>[^"]+)"\s*\((?P<omit_why>[^)]*)\)'
    r"|fill\s+(?P<fill>[^\s=]+)(?:=(?P<fill_text>\S+))?"
    r'|expect\s+"(?P<expect>[^"]+)"'
    r"|timeout\s+(?P<timeout>\d+(?:\.\d+)?))(?=\s|$)"
)
SERVE_WAIT_SECONDS = 60.0
PROGRAMS = ("agent", "collector", "workloads", "dashboard")
DEFAULT_TIMEOUT_SECONDS = 120.0
OPTION = re.compile(r"^--[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    skip_reason: str | None  # None: run it
    omit: tuple[tuple[str, str], ...] = ()  # (command prefix, why)
    fill: tuple[tuple[str, str], ...] = ()  # (word, what stands for it: {run} is the demo's)
    expect: tuple[str, ...] = ()
    timeout: float | None = None
    problems: tuple[str, ...] = ()  # marks that do not parse


def parse_marks(bodies: list[str]) -> dict:
    """The fields of :class:`Block` that ``docs-check:`` marks' bodies set."""
    fields: dict = {"skip_reason": None, "omit": [], "fill": [], "expect": [], "problems": []}
    for body in bodies:
        position = 0
        while position < len(body):
            found = DIRECTIVE.match(body, position)
            if not found:
                fields["problems"].append(f"docs-check mark not understood: {body[position:]!r}")
                break
            position = found.end()
            if found.group("skip") is not None:
                fields["skip_reason"] = found.group("skip").strip()
            elif found.group("omit"):
                fields["omit"].append((found.group("omit"), found.group("omit_why").strip()))
            elif found.group("fill"):
                fields["fill"].append((found.group("fill"), found.group("fill_text") or "{run}"))
            elif found.group("expect"):
                fields["expect"].append(found.group("expect"))
            else:
                fields["timeout"] = float(found.group("timeout"))
            while position < len(body) and body[position].isspace():
                position += 1
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


def doc_files(repo: Path) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def shell_blocks(text: str, path: str) -> list[Block]:
    """The fenced shell blocks of a Markdown text, with the ``docs-check:`` marks on the
    lines just before each fence (blank lines between them allowed)."""
    blocks: list[Block] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        fence = re.match(r"^(```+)\s*([A-Za-z]*)\s*$", lines[index])
        if not fence:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].startswith(fence.group(1)):
            end += 1
        if fence.group(2) in SHELL_LANGUAGES:
            bodies: list[str] = []
            before = index - 1
            while before >= 0:
                mark = MARK.match(lines[before])
                if mark:
                    bodies.insert(0, mark.group("body"))
                elif lines[before].strip():
                    break
                before -= 1
            blocks.append(
                Block(
                    path,
                    index + 1,
                    fence.group(2),
                    "\n".join(lines[index + 1 : end]),
                    **parse_marks(bodies),
                )
            )
        index = end + 1
    return blocks


def command_lines(block: Block) -> Iterator[tuple[int, str]]:
    """(line number, command) of a block: continuations joined, comments and a console
    block's output lines left out."""
    pending, start = "", 0
    for offset, raw in enumerate(block.text.split("\n"), start=1):
        line = raw
        if block.language == "console":
            if not line.startswith("$ ") and not pending:
                continue
            line = line.removeprefix("$ ")
        if not pending:
            start = block.line + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command and not command.startswith("#"):
            yield start, command


def _words(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars="&;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: take the words as they are
        return command.split()


@dataclass(frozen=True)
class Invocation:
    program: str
    words: tuple[str, ...]  # after the program: subcommands, options, values


def invocations(command: str) -> list[Invocation]:
    """Each of our programs a command line calls, with the words it is given."""
    found: list[Invocation] = []
    segment: list[str] = []
    for word in [*_words(command), ";"]:
        if word in ("&&", "||", ";", "&", "|") or word.startswith(("$(", "|")):
            if segment:
                found.extend(_invocation(segment))
            segment = []
        else:
            segment.append(word)
    return found


def _invocation(words: list[str]) -> list[Invocation]:
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value before it
        words = words[1:]
    if len(words) >= 3 and Path(words[0]).name.startswith("python") and words[1] == "-m":
        words = words[2:]
    if not words:
        return []
    program = Path(words[0]).name
    if words[0] not in PROGRAMS and not words[0].endswith(tuple(f"/{p}" for p in PROGRAMS)):
        return []
    rest = words[1:]
    if "--" in rest:  # what follows is the profiled script's command
        rest = rest[: rest.index("--")]
    return [Invocation(program, tuple(rest))]


class HelpCache:
    """``--help`` of each program and subcommand, asked once, in ``repo``'s code."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.repo = repo
        self.env = env
        self._texts: dict[tuple[str, ...], str | None] = {}

    def text(self, path: tuple[str, ...]) -> str | None:
        if path not in self._texts:
            result = subprocess.run(
                [sys.executable, "-m", *path, "--help"],
                cwd=self.repo,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            self._texts[path] = result.stdout if result.returncode == 0 else None
        return self._texts[path]


def subcommands_in(help_text: str) -> set[str]:
    """The subcommand names argparse lists in ``{a,b,c}``."""
    names: set[str] = set()
    for group in re.findall(r"\{([a-z0-9_,-]+)\}", help_text):
        names.update(group.split(","))
    return names


def options_in(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))


def check_invocation(invocation: Invocation, helps: HelpCache) -> list[str]:
    """Why ``invocation`` does not match its program's ``--help``; empty when it does."""
    path: tuple[str, ...] = (invocation.program,)
    help_text = helps.text(path)
    if help_text is None:
        return [f"`{invocation.program} --help` failed"]
    problems: list[str] = []
    words = list(invocation.words)
    if words and not re.fullmatch(r"[a-z][a-z0-9-]*", words[0]) and words[0][0] not in "-[":
        return []  # `collector COMMAND: message`: a placeholder or a quoted message
    while words and not words[0].startswith(("-", "[")):
        choices = subcommands_in(help_text)
        if not choices:
            break
        if words[0] not in choices:
            if len(path) == 1:  # the program's first word must be one of its commands
                problems.append(f"no subcommand {words[0]!r} in `{' '.join(path)} --help`")
                return problems
            break  # a positional argument (RUN_ID, JOBID)
        path = (*path, words.pop(0))
        deeper = helps.text(path)
        if deeper is None:
            return [f"`{' '.join(path)} --help` failed"]
        help_text = deeper
    known = options_in(help_text) | {"--help"}
    for word in words:
        for alternative in word.strip("[]").split("|"):
            option = OPTION.match(alternative.strip("[]"))
            if option and option.group(0) not in known:
                problems.append(f"no option {option.group(0)} in `{' '.join(path)} --help`")
    return problems


@dataclass(frozen=True)
class Failure:
    where: str
    command: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.command[:100]}\n    {self.why}"


INLINE_COMMAND = re.compile(r"`((?:python -m )?(?:" + "|".join(PROGRAMS) + r") [^`\n]+)`")


def inline_commands(text: str) -> Iterator[tuple[int, str]]:
    """(line, command) of each inline code span of the prose that starts with one of our
    programs (``collector job JOBID --summary``), fenced blocks left out."""
    in_fence = False
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            for match in INLINE_COMMAND.finditer(line):
                yield number, match.group(1)


def check_options(repo: Path, env: dict[str, str]) -> tuple[list[Failure], int]:
    helps = HelpCache(repo, env)
    failures: list[Failure] = []
    checked = 0
    for path in doc_files(repo):
        text = path.read_text(encoding="utf-8")
        commands = [
            (line, command)
            for block in shell_blocks(text, path.name)
            for line, command in command_lines(block)
        ]
        for line, command in [*commands, *inline_commands(text)]:
            for invocation in invocations(command):
                checked += 1
                for why in check_invocation(invocation, helps):
                    failures.append(Failure(f"{path.name}:{line}", command, why))
    return failures, checked


def serve_url(command: str) -> str | None:
    """The address a command that serves until stopped answers at; None for any other
    command (one sent to the background with ``&`` is the block's own business)."""
    if command.split(" #")[0].rstrip().endswith("&"):
        return None
    found = invocations(command)
    if len(found) != 1 or found[0].program not in ("dashboard", "collector"):
        return None
    words = list(found[0].words)
    if not words or words[0] != "serve" or {"--help", "-h"} & set(words):
        return None
    options: dict[str, str] = {}
    for index, word in enumerate(words):
        if word.startswith("--") and "=" in word:
            name, _, value = word.partition("=")
            options[name] = value
        elif word.startswith("--") and index + 1 < len(words):
            options[word] = words[index + 1]
    if found[0].program == "dashboard":
        host, port, path = options.get("--host", "127.0.0.1"), options.get("--port", "8050"), "/"
    else:
        host, _, port = options.get("--listen", "127.0.0.1:8086").rpartition(":")
        path = "/health"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{port}{path}"


def run_id_in(clone: Path) -> str | None:
    """``make demo``'s run: the newest ``runs/RUN.sqlite`` (a collector's own
    ``runs/epochscope.sqlite`` is no run's)."""
    stores = [p for p in (clone / "runs").glob("*.sqlite") if p.stem != "epochscope"]
    return max(stores, key=lambda p: p.stat().st_mtime).stem if stores else None


def block_script(block: Block, run_id: str | None) -> tuple[str, list[str]]:
    """The shell script a block runs (omitted commands left out, placeholders filled,
    servers started, checked and stopped), and what is wrong with its marks."""
    problems = list(block.problems)
    used: set[str] = set()
    filled: set[str] = set()
    lines: list[str] = []
    for _, command in command_lines(block):
        prefix = next((p for p, _ in block.omit if command.startswith(p)), None)
        if prefix is not None:
            used.add(prefix)
            continue
        for word, text in block.fill:
            pattern = rf"(?<![\w-]){re.escape(word)}(?![\w-])"
            if re.search(pattern, command):
                filled.add(word)
                if run_id is None:
                    problems.append(f"no make demo run in runs/ to fill {word}")
                    continue
                filling = text.format(run=run_id)
                command = re.sub(pattern, lambda _, filling=filling: filling, command)
        url = serve_url(command)
        if url is not None:
            command = (
                f'"$DOCS_CHECK_PYTHON" "$DOCS_CHECK_SCRIPT" --serve {shlex.quote(url)} '
                + shlex.quote(command)
            )
        lines.append(command)
    problems += [f'omit "{p}" matches no command' for p, _ in block.omit if p not in used]
    problems += [f"fill {w}: no such word in the block" for w, _ in block.fill if w not in filled]
    return "\n".join(lines), problems


def run_blocks(
    clone: Path, env: dict[str, str], timeout: float
) -> tuple[list[Failure], list[Block], list[Block]]:
    failures: list[Failure] = []
    ran: list[Block] = []
    skipped: list[Block] = []
    env = {**env, "DOCS_CHECK_PYTHON": sys.executable, "DOCS_CHECK_SCRIPT": str(Path(__file__))}
    for path in doc_files(clone):
        for block in shell_blocks(path.read_text(encoding="utf-8"), path.name):
            where = f"{block.path}:{block.line}"
            if block.skip_reason is not None:
                skipped.append(block)
                continue
            ran.append(block)
            script, problems = block_script(block, run_id_in(clone))
            if problems:
                failures += [Failure(where, block.text, why) for why in problems]
                continue
            limit = block.timeout or timeout
            started = time.monotonic()
            try:
                result = subprocess.run(
                    ["bash", "-e", "-c", script],
                    cwd=clone,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=limit,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                failures.append(Failure(where, script, f"still running after {limit:g} s"))
                continue
            print(f"  {where}: exit {result.returncode} in {time.monotonic() - started:.1f} s")
            output = result.stdout + result.stderr
            if result.returncode != 0:
                tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
                failures.append(
                    Failure(where, script, f"exit {result.returncode}: " + " | ".join(tail))
                )
            failures += [
                Failure(where, script, f"output lacks {text!r}: " + output.strip()[-300:])
                for text in block.expect
                if text not in output
            ]
    return failures, ran, skipped


def _answers(url: str) -> int | None:
    """The HTTP status ``url`` answers with (401 included), None when nothing listens."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def _ctrl_c_as_in_a_terminal() -> None:
    """A check started in the background (``nohup``, ``&`` in a script, some CI runners)
    ignores SIGINT, and the server would inherit that and outlive the Ctrl-C the docs
    promise: give it the terminal's default, as a user's shell does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def serve_check(url: str, command: str, wait: float = SERVE_WAIT_SECONDS) -> int:
    """Start ``command`` (a server), wait for ``url`` to answer, stop it with SIGINT as
    Ctrl-C would; 0 when it answered below 500 and stopped."""
    if _answers(url) is not None:
        print(f"something already answers at {url}: stop it, then run the check again")
        return 1
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            ["bash", "-c", command],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_ctrl_c_as_in_a_terminal,
        )
        started = time.monotonic()
        status = None
        while status is None and process.poll() is None and time.monotonic() - started < wait:
            time.sleep(0.25)
            status = _answers(url)
        answered = time.monotonic() - started
        stopped_by = None
        for sig, grace in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if process.poll() is not None:
                break
            stopped_by = sig.name
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                continue
        log.seek(0)
        output = log.read().decode(errors="replace").strip()
    tail = " | ".join(output.splitlines()[-3:])
    if status is None:
        ended = f"exited {process.returncode}" if stopped_by is None else f"{wait:g} s passed"
        print(f"{command}: nothing answered at {url} ({ended}): {tail}")
        return 1
    if status >= 500:
        print(f"{command}: {url} answered HTTP {status}: {tail}")
        return 1
    if stopped_by not in (None, "SIGINT"):
        print(f"{command}: answered, but SIGINT did not stop it ({stopped_by} did): {tail}")
        return 1
    print(f"served {url}: HTTP {status} after {answered:.1f} s, stopped by Ctrl-C (SIGINT)")
    return 0


def clone_env(clone: Path, venv_bin: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(clone)
    env["VIRTUAL_ENV"] = str(venv_bin.parent)
    env.pop("EPOCHSCOPE_DB", None)
    return env


# What `make env` builds that git does not carry: the clone gets the checkout's, as if its
# own `make env` had run (the .venv itself is linked).
BUILT = ("dashboard/assets/plotly-basic.min.js", "dashboard/assets/plotly-basic.LICENSE.txt")
# The prerequisites of the Makefile's set-up targets: dated back in the clone, so that its
# `make demo` finds the linked .venv up to date and never installs the clone into it.
SETUP_PREREQUISITES = ("pyproject.toml", "dashboard/fetch_bundle.py")


def prepare_clone(repo: Path, clone: Path) -> None:
    (clone / ".venv").symlink_to(repo / ".venv")  # `. .venv/bin/activate` works
    for name in BUILT:
        if (repo / name).exists():
            shutil.copy2(repo / name, clone / name)
    for name in SETUP_PREREQUISITES:
        os.utime(clone / name, (0, 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to clone")
    parser.add_argument("--no-run", action="store_true", help="check the options only")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS,
                        help="seconds each block may run (default %(default)g)")  # fmt: skip
    parser.add_argument("--serve", nargs=2, metavar=("URL", "COMMAND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:  # one server command of a block, as run_blocks writes it
        return serve_check(*args.serve)
    started = time.monotonic()
    venv_bin = args.repo / ".venv" / "bin"
    with tempfile.TemporaryDirectory(prefix="docs-check-") as temporary:
        clone = Path(temporary) / "epochscope"
        subprocess.run(
            ["git", "clone", "--quiet", str(args.repo), str(clone)], check=True, timeout=300
        )
        prepare_clone(args.repo, clone)
        env = clone_env(clone, venv_bin)
        failures, checked = check_options(clone, env)
        print(f"options: {checked} commands checked against --help, {len(failures)} wrong")
        ran: list[Block] = []
        skipped: list[Block] = []
        if not args.no_run:
            run_failures, ran, skipped = run_blocks(clone, env, args.timeout)
            failures += run_failures
            omitted = sum(
                1
                for block in ran
                for _, command in command_lines(block)
                if any(command.startswith(prefix) for prefix, _ in block.omit)
            )
            print(
                f"blocks: {len(ran)} run ({omitted} of their commands omitted: docs-check: "
                f"omit), {len(run_failures)} failed, {len(skipped)} skipped (docs-check: skip)"
            )
    for failure in failures:
        print(failure)
    print(f"docs-check: {time.monotonic() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
