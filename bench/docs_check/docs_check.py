"""Re-run the shell commands of README.md and docs/*.md from a fresh clone (``make docs-check``).

Two checks, on every fenced ``bash``/``sh``/``console`` block:

1. **options**: each ``agent``, ``collector``, ``workloads`` or ``dashboard`` command line
   (also as ``python -m X``, after ``VAR=value`` or a ``$`` prompt) names a subcommand and
   options that its ``--help`` lists. Every block is checked, skipped ones too: a command a
   cluster needs still has to be spelled right. Words after a lone ``--`` are the user's
   script's, not ours.
2. **runs**: each block not marked with ``<!-- docs-check: skip (reason) -->`` on a line
   before it is run with ``bash -e`` in a ``git clone`` of the checkout (what is committed:
   what a new user gets), with the checkout's ``.venv/bin`` first on ``PATH`` and the
   clone first on ``PYTHONPATH`` (so the clone's code runs, not the editable install's),
   each block under ``--timeout`` seconds.

Prints one line per failure (file:line, the command, why) and a summary; exit status 1 when
anything failed. ``--no-run`` does the options check only (no clone, a few seconds a
command family).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = ("bash", "sh", "console", "shell")
SKIP_MARK = re.compile(r"<!--\s*docs-check:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->")
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


def doc_files(repo: Path) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def shell_blocks(text: str, path: str) -> list[Block]:
    """The fenced shell blocks of a Markdown text; a skip mark counts on the nearest
    non-blank line before the fence."""
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
            before = index - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            mark = SKIP_MARK.search(lines[before]) if before >= 0 else None
            blocks.append(
                Block(
                    path,
                    index + 1,
                    fence.group(2),
                    "\n".join(lines[index + 1 : end]),
                    mark.group("reason").strip() if mark else None,
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


def run_blocks(
    clone: Path, env: dict[str, str], timeout: float
) -> tuple[list[Failure], list[Block], list[Block]]:
    failures: list[Failure] = []
    ran: list[Block] = []
    skipped: list[Block] = []
    for path in doc_files(clone):
        for block in shell_blocks(path.read_text(encoding="utf-8"), path.name):
            if block.skip_reason is not None:
                skipped.append(block)
                continue
            ran.append(block)
            script = "\n".join(command for _, command in command_lines(block))
            try:
                result = subprocess.run(
                    ["bash", "-e", "-c", script],
                    cwd=clone,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                failures.append(
                    Failure(
                        f"{block.path}:{block.line}", script, f"still running after {timeout:g} s"
                    )
                )
                continue
            if result.returncode != 0:
                tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
                failures.append(
                    Failure(
                        f"{block.path}:{block.line}",
                        script,
                        f"exit {result.returncode}: " + " | ".join(tail),
                    )
                )
    return failures, ran, skipped


def clone_env(clone: Path, venv_bin: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(clone)
    env["VIRTUAL_ENV"] = str(venv_bin.parent)
    env.pop("EPOCHSCOPE_DB", None)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to clone")
    parser.add_argument("--no-run", action="store_true", help="check the options only")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS,
                        help="seconds each block may run (default %(default)g)")  # fmt: skip
    args = parser.parse_args(argv)
    venv_bin = args.repo / ".venv" / "bin"
    with tempfile.TemporaryDirectory(prefix="docs-check-") as temporary:
        clone = Path(temporary) / "epochscope"
        subprocess.run(
            ["git", "clone", "--quiet", str(args.repo), str(clone)], check=True, timeout=300
        )
        (clone / ".venv").symlink_to(args.repo / ".venv")  # `. .venv/bin/activate` works
        env = clone_env(clone, venv_bin)
        failures, checked = check_options(clone, env)
        print(f"options: {checked} commands checked against --help, {len(failures)} wrong")
        ran: list[Block] = []
        skipped: list[Block] = []
        if not args.no_run:
            run_failures, ran, skipped = run_blocks(clone, env, args.timeout)
            failures += run_failures
            print(
                f"blocks: {len(ran)} run, {len(run_failures)} failed, {len(skipped)} skipped "
                "(docs-check: skip)"
            )
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
