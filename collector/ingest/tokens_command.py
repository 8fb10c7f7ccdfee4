"""``collector token add|list|revoke``: the scoped tokens of ``collector serve
--tokens-file`` (``netserve.tokens``). A running collector reads the file again within a
second of a change: no restart."""

from __future__ import annotations

import argparse
import json
import sys

from netserve.tokens import TokenFileError, mint_token, read_tokens_file, revoke_tokens


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except TokenFileError as error:
        print(f"collector token: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"collector token {args.token_action}: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.token_action == "add":
        token = mint_token(args.tokens_file, args.scope, args.subject)
        # the only time the token is shown: stdout, for a file or a secret store
        print(token)
        print(
            f"collector token: {args.scope} token for {args.subject} added to "
            f"{args.tokens_file} (only its hash is kept; it is not shown again)",
            file=sys.stderr,
        )
        return 0
    if args.token_action == "list":
        entries = read_tokens_file(args.tokens_file)
        if args.format == "json":
            rows = [
                {"scope": e.scope, "subject": e.subject, "created": e.created, "id": e.digest[:12]}
                for e in entries
            ]
            print(json.dumps(rows, indent=1))
        else:
            print(f"{'scope':<6} {'subject':<32} {'created':<20} id")
            for e in entries:
                print(f"{e.scope:<6} {e.subject:<32} {e.created:<20} {e.digest[:12]}")
        return 0
    removed = revoke_tokens(args.tokens_file, args.scope, args.subject)
    if not removed:
        print(
            f"collector token revoke: no token of {args.subject} in {args.tokens_file}",
            file=sys.stderr,
        )
        return 1
    print(f"collector token: {removed} token(s) of {args.subject} revoked", file=sys.stderr)
    return 0
