"""HTTP basic authentication for the dashboard, and the rule for where it may listen.

The dashboard binds 127.0.0.1 by default. Listening on any other address exposes the run
data to the network, so it is refused unless ``--auth user:password`` is given; then every
request, the page and its assets and callbacks alike, needs those credentials. The password
is never logged. Basic auth sends it in clear on each request: put a TLS proxy in front when
the network is not trusted.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from flask import Flask, Response, request

from netserve import listen
from netserve.listen import is_loopback

__all__ = ["AuthError", "Credentials", "check_bind", "is_loopback", "parse_credentials"]

REALM = "epochscope"


class AuthError(ValueError):
    """Bad --auth value, or a non-loopback bind without credentials."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = ""

    def __repr__(self) -> str:  # keep the password out of logs and tracebacks
        return f"Credentials(user={self.user!r}, password=***)"

    def matches(self, user: str | None, password: str | None) -> bool:
        user_ok = hmac.compare_digest((user or "").encode(), self.user.encode())
        password_ok = hmac.compare_digest((password or "").encode(), self.password.encode())
        return user_ok and password_ok


def parse_credentials(text: str) -> Credentials:
    """``user:password`` (the password may contain colons; neither part may be empty)."""
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise AuthError("--auth must be USER:PASSWORD with both parts non-empty")
    return Credentials(user, password)


def check_bind(host: str, credentials: Credentials | None) -> None:
    """Refuse to listen beyond loopback without credentials (``netserve.listen``'s rule)."""
    try:
        listen.check_bind(
            host,
            credentials is not None,
            exposes="the dashboard shows run data",
            give="--auth USER:PASSWORD to require HTTP basic authentication",
        )
    except listen.NeedsAuth as error:
        raise AuthError(str(error)) from None


def require_basic_auth(server: Flask, credentials: Credentials) -> None:
    """Answer 401 to every request that does not carry the credentials."""

    @server.before_request
    def _check_credentials() -> Response | None:
        given = request.authorization
        if (
            given is not None
            and given.type == "basic"
            and credentials.matches(given.username, given.password)
        ):
            return None
        return Response(
            "authentication required\n",
            status=401,
            headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
            mimetype="text/plain",
        )
