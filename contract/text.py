"""Text that shows as written: control characters (Unicode category Cc: newlines, NUL, ESC
and the rest) and bidirectional formatting characters are replaced by their visible escapes
(``\\x1b``, ``\\u202e``), so a name or a tag never executes in a terminal, never reorders a
page, and fits on one line of line protocol.

One rule for every writer's names and tags (contract.point) and every view that prints text
a writer sent; ``shown`` also cuts it to ``MAX_SHOWN_CHARS`` for a table cell or a heading
(the collector's terminal tables, the dashboard's pages).
"""

from __future__ import annotations

import unicodedata

from contract.identifiers import _BIDI as BIDI_FORMATTING


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with each control or bidirectional formatting character as its escape."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        _escape(char) if char in BIDI_FORMATTING or unicodedata.category(char) == "Cc" else char
        for char in text
    )


MAX_SHOWN_CHARS = 120  # a cell of text a writer sent, in a table


def shown(text: object) -> str:
    """Text a writer sent (a model, a job id, a host) as a view shows it: ``visible``, cut
    at ``MAX_SHOWN_CHARS`` with an ellipsis."""
    escaped = visible("" if text is None else str(text))
    if len(escaped) > MAX_SHOWN_CHARS:
        escaped = escaped[: MAX_SHOWN_CHARS - 1] + "…"
    return escaped
