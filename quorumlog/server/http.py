"""A small HTTP/1.1 responder for /status and /metrics: GET only, bounded request size, one response per
request, keep-alive honoured. Enough for curl, Prometheus and the CLI; not a web framework.

With a token (the node's `token`), every request must carry it — `Authorization: Bearer TOKEN` (what
Prometheus's `authorization` scrape setting sends) or `?token=TOKEN` — compared in constant time; 401
otherwise, and nothing of the node's state in the answer."""

from __future__ import annotations

import asyncio
import ssl
import hmac
import inspect
import logging
from typing import Any, Callable
from urllib.parse import parse_qs

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD_BYTES = 8 * 1024
REQUEST_TIMEOUT_S = 10.0

Route = Callable[[], Any]  # () -> (content type, body), or an awaitable of it


class HttpServer:
    def __init__(self, routes: dict[str, Route], token: str | None = None) -> None:
        self._routes = routes
        self._token = token
        self.unauthorized = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> None:
        tls = {"ssl": ssl_context, "ssl_handshake_timeout": REQUEST_TIMEOUT_S} if ssl_context is not None else {}
        self._server = await asyncio.start_server(self._serve, host, port, limit=MAX_REQUEST_HEAD_BYTES, **tls)
        log.info("http listening host=%s port=%d tls=%s", host, port, ssl_context is not None)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for w in list(self._writers):
            w.close()
        try:
            await asyncio.wait_for(self._server.wait_closed(), 2)
        except asyncio.TimeoutError:
            pass
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                        ConnectionError):
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                parts = request_line.split(" ")
                if len(parts) != 3:
                    await self._respond(writer, 400, "text/plain", b"bad request\n", close=True)
                    return
                method, target, version = parts
                headers = {h.split(":", 1)[0].strip().lower(): h.split(":", 1)[1].strip()
                           for h in header_lines if ":" in h}
                close = version != "HTTP/1.1" or headers.get("connection", "").lower() == "close"
                path = target.split("?", 1)[0]
                route = self._routes.get(path)
                if method not in ("GET", "HEAD"):
                    await self._respond(writer, 405, "text/plain", b"method not allowed\n", close=True)
                    return
                if self._token is not None and not self._authorized(headers, target):
                    self.unauthorized += 1
                    log.warning("http request refused: bad or missing token path=%s peer=%s", path,
                                writer.get_extra_info("peername"))
                    await self._respond(writer, 401, "text/plain", b"unauthorized: bad or missing token\n",
                                        close=close)
                elif route is None:
                    await self._respond(writer, 404, "text/plain", b"not found\n", close=close)
                else:
                    try:
                        result = route()
                        if inspect.isawaitable(result):
                            result = await result
                        content_type, body = result
                        status = 200
                    except Exception:  # noqa: BLE001 - a broken route must not kill the server
                        log.exception("http route failed path=%s", path)
                        content_type, body, status = "text/plain", b"internal error\n", 500
                    await self._respond(writer, status, content_type, b"" if method == "HEAD" else body,
                                        close=close, length=len(body))
                if close:
                    return
        finally:
            self._writers.discard(writer)
            writer.close()

    def _authorized(self, headers: dict[str, str], target: str) -> bool:
        assert self._token is not None
        given = ""
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        elif "?" in target:
            given = parse_qs(target.split("?", 1)[1]).get("token", [""])[0]
        return hmac.compare_digest(given.encode(), self._token.encode())

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, content_type: str, body: bytes, *,
                       close: bool, length: int | None = None) -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
                  500: "Internal Server Error"}[status]
        challenge = "WWW-Authenticate: Bearer\r\n" if status == 401 else ""
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body) if length is None else length}\r\n{challenge}"
                f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode()
        writer.write(head + body)
        try:
            await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)
        except (asyncio.TimeoutError, ConnectionError):
            pass
