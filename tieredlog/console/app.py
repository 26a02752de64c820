"""The console as a WSGI application beside ``/metrics`` on the metrics port.

Read-only: GET and HEAD only, nothing changes state. Each page takes a fresh snapshot: its first part
on the broker's event loop (``source``), the remote tier's part on the HTTP server's thread, then
renders it. No record data is ever read, only offsets, sizes, states and names.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable
from urllib.parse import unquote

from tieredlog.console import render
from tieredlog.console.model import Snapshot

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# topics -> the snapshot (None: every topic's remote tier); raises TimeoutError when the loop is busy
SnapshotSource = Callable[[Iterable[str] | None], Snapshot]


class ConsoleApp:
    def __init__(self, source: SnapshotSource, metrics_app: WsgiApp) -> None:
        self._source = source
        self._metrics_app = metrics_app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/") or "/"
        if path == "/metrics" or path.startswith("/metrics/"):
            return self._metrics_app(environ, start_response)
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _reply(start_response, "405 Method Not Allowed", "the console is read-only\n", "text/plain",
                          [("Allow", "GET, HEAD")])
        if path == "/":
            return _reply(start_response, "302 Found", "", "text/plain", [("Location", render.BASE)])
        try:
            status, html = self._route(path)
        except TimeoutError:
            return _reply(start_response, "503 Service Unavailable", "the broker's event loop did not answer in time\n",
                          "text/plain")
        except Exception:  # noqa: BLE001 - a page must not take the endpoint down with it
            log.warning("console page %s failed", path, exc_info=True)
            return _reply(start_response, "500 Internal Server Error", "the console failed to render this page\n",
                          "text/plain")
        body = _reply(start_response, status, html, "text/html; charset=utf-8")
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else body  # HEAD: the headers alone

    def _route(self, path: str) -> tuple[str, str]:
        base = render.BASE
        if path in (base, base + "/"):
            return "200 OK", render.overview_page(self._source(None))
        for prefix, only_topic, page in ((base + "/topic/", True, render.topic_page),
                                         (base + "/group/", False, render.group_page)):
            if path.startswith(prefix) and len(path) > len(prefix):
                name = unquote(path[len(prefix):])
                snap = self._source([name] if only_topic else [])
                ok = snap.topic(name) is not None if only_topic else snap.group(name) is not None
                return ("200 OK" if ok else "404 Not Found"), page(snap, name)
        snap = self._source([])
        return "404 Not Found", render.not_found_page(snap, f"no page {path}")


def _reply(start_response: Callable[..., Any], status: str, body: str, content_type: str,
           headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    data = body.encode()
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(data))),
                            ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                            *(headers or [])])
    return [data]
