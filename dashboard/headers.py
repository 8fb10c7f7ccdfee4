"""Security headers on every dashboard response.

The pages are Dash's: its renderer and the component bundles are served from this process
(``serve_locally``), and the only inline scripts are Dash's own (the renderer's start and
the app's clientside callbacks), allowed by their hashes (``Dash.csp_hashes``). Plotly and
Dash set inline styles, hence ``style-src 'unsafe-inline'``; plotly draws some marker
shapes and fonts from ``data:`` URLs. The pages load no frame (``assets/native-builtins.js``
opens an empty one, nothing fetched, for a moment to take the browser's own built-ins
from it), and no page may frame the dashboard (clickjacking): ``frame-ancestors 'none'``
and ``X-Frame-Options: DENY``.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask import Flask, Response


def content_security_policy(script_hashes: Sequence[str]) -> str:
    directives = {
        "default-src": ["'self'"],
        "script-src": ["'self'", *script_hashes],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
    return "; ".join(f"{name} {' '.join(values)}" for name, values in directives.items())


def security_headers(script_hashes: Sequence[str]) -> dict[str, str]:
    return {
        "Content-Security-Policy": content_security_policy(script_hashes),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


def add_security_headers(server: Flask, script_hashes: Sequence[str]) -> None:
    """Every response of ``server`` (pages, assets, callbacks, 401s, 404s) carries the
    headers; ``script_hashes``: the CSP hashes of the page's inline scripts."""
    headers = security_headers(script_hashes)

    @server.after_request
    def _secure(response: Response) -> Response:
        for name, value in headers.items():
            response.headers[name] = value
        return response
