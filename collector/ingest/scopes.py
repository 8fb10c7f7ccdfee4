"""Who a write comes from and what it may write (issue 44, item 1).

A request's token names an identity (``netserve.tokens``): a node token may write only the
samples of its own host (``host`` tag = its subject), a run token workload events (of the
runs it created: the store checks that, ``SqliteStore.write``) and its own runs' and jobs'
series (``collector.ingest.ownership`` checks whose they are), an admin anything. What an
identity may not write is left out of the batch and named; the rest is stored, as the
valid lines of a body with malformed ones are (the answer is then 403, not 204).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import replace

from collector.lineprotocol import ParsedBody
from contract.schema import Tag
from netserve.tokens import Identity, Scope


def offered_tokens(authorization: str, query: dict[str, list[str]], v1: bool) -> list[str]:
    """The tokens a request offers: ``Authorization: Token|Bearer <t>``; on ``/write``
    (``v1``) also Basic auth's password or ``?p=``."""
    offered: list[str] = []
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() in ("token", "bearer"):
        offered.append(credentials.strip())
    elif v1 and scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
            offered.append(decoded.partition(":")[2])
        except (binascii.Error, UnicodeDecodeError):
            pass
    if v1:
        offered.extend(query.get("p", []))
    return offered


def within_scope(identity: Identity, parsed: ParsedBody) -> tuple[ParsedBody, list[str]]:
    """The part of ``parsed`` that ``identity``'s scope allows, and one line per series or
    host it does not (run ownership is the store's to check, in the write's transaction)."""
    if identity.is_admin:
        return parsed, []
    refused: list[str] = []
    groups = []
    for group in parsed.groups:
        host = dict(group.tag_items).get(Tag.HOST, "")
        if identity.scope == Scope.RUN or (
            identity.scope == Scope.NODE and host == identity.subject
        ):
            groups.append(group)  # a run token's: whose run or job, ingest.ownership says
        elif identity.scope == Scope.NODE:
            refused.append(
                f"{group.n} point(s) of {group.measurement} host={host!r}: "
                f"{identity.name} may write host={identity.subject!r} only"
            )
        else:
            refused.append(
                f"{group.n} point(s) of {group.measurement} host={host!r}: "
                f"{identity.name} may not write samples"
            )
    events = parsed.events
    if identity.scope == Scope.NODE:
        events = [e for e in parsed.events if e.tags.get(Tag.HOST, "") == identity.subject]
        if len(events) != len(parsed.events):
            refused.append(
                f"{len(parsed.events) - len(events)} workload event(s) of other hosts: "
                f"{identity.name} may write host={identity.subject!r} only"
            )
    if not refused:
        return parsed, []
    left_out = sum(group.n for group in parsed.groups) - sum(group.n for group in groups)
    left_out += len(parsed.events) - len(events)
    allowed = replace(parsed, groups=groups, events=events, points=parsed.points - left_out)
    return allowed, refused
