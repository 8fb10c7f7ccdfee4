"""A loopback OTLP/HTTP receiver for tests: keeps every request's path, headers and
decoded JSON body (the OTLP JSON mapping), answers a chosen status."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OtlpReceiver:
    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                assert self.headers.get("Content-Type") == "application/json"
                receiver.requests.append((self.path, dict(self.headers), json.loads(body)))
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def attributes(items: list[dict[str, Any]]) -> dict[str, str]:
    return {item["key"]: item["value"]["stringValue"] for item in items}


def metrics_by_name(request: dict[str, Any]) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """Every metric of an ExportMetricsServiceRequest: name -> (resource attributes, metric)."""
    found = {}
    for resource_metrics in request["resourceMetrics"]:
        resource = attributes(resource_metrics["resource"]["attributes"])
        for scope_metrics in resource_metrics["scopeMetrics"]:
            for metric in scope_metrics["metrics"]:
                found[metric["name"]] = (resource, metric)
    return found
