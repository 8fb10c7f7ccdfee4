"""What a writer may name things: tag values are identifiers every view shows (hosts, run
ids, frameworks, devices), so a value that cannot be shown as plain text, or that would pass
for something else, is refused at ingest with the line's number, never stored.

- A tag value holds no control character (Unicode category Cc) and no bidirectional
  formatting character (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C): those make a
  page show something other than what was written.
- A tag value is at most ``MAX_TAG_CHARS`` characters; a host at most ``MAX_HOST_CHARS`` (a
  DNS name's limit) and a run id at most ``MAX_RUN_ID_CHARS`` (what ``--run-id`` allows).
- A string field (a run event's ``model``, ``slurm_job_id``...) is at most
  ``MAX_STRING_FIELD_CHARS`` characters: a 200 KB model name made the Runs page 2,244,243 px
  wide.
- A host is never a name the views reserve for the row that adds up every host
  (``contract.markers``), in any case or spacing.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

from contract.markers import ALL_HOSTS, ALL_HOSTS_LABEL
from contract.schema import Tag

MAX_TAG_CHARS = 1024
MAX_HOST_CHARS = 253
MAX_RUN_ID_CHARS = 128
MAX_STRING_FIELD_CHARS = 1024
_LIMITS = {Tag.HOST: MAX_HOST_CHARS, Tag.RUN_ID: MAX_RUN_ID_CHARS}
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
RESERVED_HOSTS = frozenset(name.casefold() for name in (ALL_HOSTS, ALL_HOSTS_LABEL, "(all)"))


def _hidden_character(value: str) -> str | None:
    if value.isascii() and value.isprintable():  # no Cc (ASCII's are unprintable), no bidi
        return None
    for char in value:
        if char in _BIDI or unicodedata.category(char) == "Cc":
            return f"U+{ord(char):04X}"
    return None


def tag_problem(tags: Iterable[tuple[str, str]]) -> str | None:
    """Why these tags cannot be stored, or None when they can."""
    for key, value in tags:
        limit = _LIMITS.get(key, MAX_TAG_CHARS)
        if len(value) > limit:
            return f"tag {key[:40]!r} is {len(value):,} characters long (at most {limit:,})"
        hidden = _hidden_character(value)
        if hidden:
            return (
                f"tag {key[:40]!r} holds a control or bidirectional formatting character "
                f"({hidden}): names must read as they are written"
            )
        if key == Tag.HOST and " ".join(value.split()).casefold() in RESERVED_HOSTS:
            return f"host {value!r} is reserved for the row that adds up every host"
    return None


def string_field_problem(fields: Mapping[str, object]) -> str | None:
    """Why these fields cannot be stored (a string too long), or None when they can."""
    for name, value in fields.items():
        if type(value) is str and len(value) > MAX_STRING_FIELD_CHARS:
            return (
                f"field {name[:40]!r} is {len(value):,} characters, over the "
                f"{MAX_STRING_FIELD_CHARS:,} a string field may hold"
            )
    return None
