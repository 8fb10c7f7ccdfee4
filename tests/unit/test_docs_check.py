"""bench/docs_check/docs_check.py's parsing: fenced shell blocks and their skip marks, the
command lines in them, our programs' invocations, and the check against ``--help`` texts
(given here as text: the real ``--help`` runs in tests/system/test_docs_commands.py)."""

from __future__ import annotations

import importlib.util
import shlex
import socket
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


MARKED = """<!-- make docs-check: a plain comment above the marks stops nothing -->
<!-- docs-check: fill RUN_ID expect "per epoch, per host" -->

<!-- docs-check: omit "workloads profile" (a user's main.py) timeout 30 -->
```bash
collector report RUN_ID --db runs/RUN_ID.sqlite
dashboard serve --db runs/RUN_ID.sqlite --port 8123   # http://127.0.0.1:8123
workloads profile --data-dir /data/imagenet -- python main.py
```
"""


def test_marks_omit_fill_expect_and_timeout() -> None:
    (block,) = docs_check.shell_blocks(MARKED, "doc.md")
    assert block.skip_reason is None
    assert block.omit == (("workloads profile", "a user's main.py"),)
    assert block.fill == (("RUN_ID", "{run}"),)
    assert block.expect == ("per epoch, per host",)
    assert block.timeout == 30.0
    assert block.problems == ()


def test_the_script_omits_fills_and_checks_servers() -> None:
    (block,) = docs_check.shell_blocks(MARKED, "doc.md")
    script, problems = docs_check.block_script(block, "tf-1")
    assert problems == []
    report, serve = script.split("\n")
    assert report == "collector report tf-1 --db runs/tf-1.sqlite"
    assert serve.startswith('"$DOCS_CHECK_PYTHON" "$DOCS_CHECK_SCRIPT" --serve ')
    assert "http://127.0.0.1:8123/ 'dashboard serve --db runs/tf-1.sqlite --port 8123" in serve
    _, problems = docs_check.block_script(block, None)
    assert problems == ["no make demo run in runs/ to fill RUN_ID"] * 2


def test_marks_that_match_nothing_or_do_not_parse_are_failures() -> None:
    text = '<!-- docs-check: omit "agent run" (x) fill JOBID -->\n```bash\nagent sample\n```\n'
    (block,) = docs_check.shell_blocks(text, "doc.md")
    assert docs_check.block_script(block, "r")[1] == [
        'omit "agent run" matches no command',
        "fill JOBID: no such word in the block",
    ]
    (bad,) = docs_check.shell_blocks("<!-- docs-check: skip it -->\n```sh\nls\n```\n", "d.md")
    assert bad.problems == ("docs-check mark not understood: 'skip it'",)


def test_fill_with_text_replaces_whole_words_only() -> None:
    text = (
        "<!-- docs-check: fill runs/epochscope.sqlite=runs/{run}.sqlite -->\n```sh\n"
        "collector runs --db runs/epochscope.sqlite --tokens-file /etc/epochscope/t\n```\n"
    )
    (block,) = docs_check.shell_blocks(text, "d.md")
    assert docs_check.block_script(block, "r")[0] == (
        "collector runs --db runs/r.sqlite --tokens-file /etc/epochscope/t"
    )


def test_servers_and_their_addresses() -> None:
    url = docs_check.serve_url
    assert url("dashboard serve --db f") == "http://127.0.0.1:8050/"
    assert url("dashboard serve --host 0.0.0.0 --auth a:b") == "http://127.0.0.1:8050/"
    assert url("python -m dashboard serve --port=9000") == "http://127.0.0.1:9000/"
    assert url("collector serve --db f") == "http://127.0.0.1:8086/health"
    assert url("collector serve --listen 127.0.0.2:9999") == "http://127.0.0.2:9999/health"
    assert url("collector serve --db f &   # in the background") is None
    assert url("dashboard serve --help") is None
    assert url("collector report RUN --db f") is None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_server_is_started_asked_and_stopped_by_ctrl_c(capsys) -> None:
    port = _free_port()
    command = f"{shlex.quote(sys.executable)} -m http.server {port} --bind 127.0.0.1"
    assert docs_check.serve_check(f"http://127.0.0.1:{port}/", command, wait=20) == 0
    assert "HTTP 200" in capsys.readouterr().out
    assert docs_check._answers(f"http://127.0.0.1:{port}/") is None  # it is gone


def test_a_server_that_exits_at_once_is_a_failure(capsys) -> None:
    port = _free_port()
    assert docs_check.serve_check(f"http://127.0.0.1:{port}/", "echo no store; exit 1") == 1
    assert "nothing answered" in capsys.readouterr().out
