"""bench/docs_check/docs_check.py's parsing: fenced shell blocks and their skip marks, the
command lines in them, our programs' invocations, and the check against ``--help`` texts
(given here as text: the real ``--help`` runs in tests/system/test_docs_commands.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "docs_check" / "docs_check.py"
_spec = importlib.util.spec_from_file_location("docs_check", SCRIPT)
assert _spec and _spec.loader
docs_check = importlib.util.module_from_spec(_spec)
sys.modules["docs_check"] = docs_check  # dataclasses look their module up there
_spec.loader.exec_module(docs_check)

DOC = """# Title

```bash
agent sample --once --format json   # a comment
```

<!-- docs-check: skip (needs a cluster) -->

```sh
collector report RUN_ID --db runs/x.sqlite \\
    --findings
```

```console
$ workloads cache report runs/data
before: 0.042 of 0.042 GiB
```

```toml
[otlp]
```
"""


def test_blocks_their_languages_lines_and_skip_marks() -> None:
    blocks = docs_check.shell_blocks(DOC, "doc.md")
    assert [(b.line, b.language, b.skip_reason) for b in blocks] == [
        (3, "bash", None),
        (9, "sh", "needs a cluster"),
        (14, "console", None),
    ]


def test_command_lines_join_continuations_and_drop_console_output() -> None:
    blocks = docs_check.shell_blocks(DOC, "doc.md")
    assert list(docs_check.command_lines(blocks[1])) == [
        (10, "collector report RUN_ID --db runs/x.sqlite      --findings")
    ]
    assert list(docs_check.command_lines(blocks[2])) == [(15, "workloads cache report runs/data")]


def test_invocations_of_our_programs_only() -> None:
    found = docs_check.invocations(
        "EPOCHSCOPE_X=1 python -m dashboard serve --host 0.0.0.0 | tee log && "
        "workloads profile --collector URL -- python main.py --epochs 3; ls --all"
    )
    assert found == [
        docs_check.Invocation("dashboard", ("serve", "--host", "0.0.0.0")),
        docs_check.Invocation("workloads", ("profile", "--collector", "URL")),
    ]


class Helps:
    def __init__(self, texts: dict[tuple[str, ...], str]) -> None:
        self.texts = texts

    def text(self, path: tuple[str, ...]) -> str | None:
        return self.texts.get(path)


HELPS = Helps(
    {
        ("collector",): "usage: collector {serve,report,token} ...",
        ("collector", "report"): "usage: collector report [--db DB] [--findings] run_id",
        ("collector", "token"): "usage: collector token {add,list} ...",
        ("collector", "token", "add"): "usage: collector token add --scope S --subject X",
    }
)


def check(command: str) -> list[str]:
    (invocation,) = docs_check.invocations(command)
    return docs_check.check_invocation(invocation, HELPS)


def test_a_right_command_passes() -> None:
    assert check("collector report RUN --db f --findings") == []
    assert check("collector token add --scope node --subject gpu01") == []
    assert check("collector report RUN [--db FILE] [--findings|--help]") == []


def test_a_wrong_option_or_subcommand_is_named() -> None:
    assert check("collector report RUN --columns loss") == [
        "no option --columns in `collector report --help`"
    ]
    assert check("collector reprot RUN") == ["no subcommand 'reprot' in `collector --help`"]
    assert check("collector token add --scope node --tokens-file f") == [
        "no option --tokens-file in `collector token add --help`"
    ]


def test_placeholders_and_messages_in_prose_are_not_commands() -> None:
    assert check("collector COMMAND: message") == []
    text = "Run `collector report RUN --findings`; see ```bash``` blocks. `collector x: y`"
    assert list(docs_check.inline_commands(text)) == [
        (1, "collector report RUN --findings"),
        (1, "collector x: y"),
    ]
