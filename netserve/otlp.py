"""OTLP/HTTP with the JSON encoding, the parts the agent's metrics export (agent.otlp) and
the collector's findings export (collector.export.otlp) share: the headers file (auth for a
site's OpenTelemetry Collector: ``Name: value`` lines, never logged), attributes and the POST."""

from __future__ import annotations

import http.client
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUEST_TIMEOUT_SECONDS = 10.0


class OtlpHeadersError(ValueError):
    """The headers file cannot be used; the message names the file and the line."""


def parse_headers(text: str, source: str = "headers file") -> dict[str, str]:
    """``Name: value`` a line (blank lines and ``#`` comments skipped) -> the headers."""
    headers: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, colon, value = stripped.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not name or any(ch in name for ch in ' \t()<>@,;\\"/[]?={}'):
            # the line may hold a secret: only its number is shown
            raise OtlpHeadersError(f"{source} line {number}: must be 'Name: value'")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise OtlpHeadersError(
                f"{source} line {number}: the value of {name} is not Latin-1"
            ) from None
        headers[name] = value
    return headers


def read_headers_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise OtlpHeadersError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise OtlpHeadersError(f"{path} is not UTF-8 text") from None
    return parse_headers(text, str(path))


def string_attributes(pairs: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"key": key, "value": {"stringValue": value}} for key, value in pairs]


@dataclass(frozen=True)
class PostOutcome:
    status: int  # 0: no answer (refused, timed out)
    message: str

    @property
    def delivered(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retry(self) -> bool:
        return self.status == 0 or self.status >= 500 or self.status in (408, 429)


def post_json(
    url: str, body: bytes, headers: Mapping[str, str], timeout: float = REQUEST_TIMEOUT_SECONDS
) -> PostOutcome:
    """POST ``body`` as ``application/json`` (one connection a request: at most one a batch)."""
    parts = urllib.parse.urlsplit(url)
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_class(parts.hostname or "", parts.port, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        connection.request("POST", path, body, {**headers, "Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.read(4096).decode("utf-8", "replace").strip()
        return PostOutcome(response.status, answer[:200])
    except (OSError, http.client.HTTPException) as error:
        return PostOutcome(0, str(error) or type(error).__name__)
    finally:
        connection.close()
