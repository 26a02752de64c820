"""GETs of S3 objects outside botocore: a URL presigned for each request (SigV4 query auth, valid 5
minutes; the Range header is not part of the signature), sent over a pool of keep-alive connections
of the standard library's ``http.client``.

A remote reader's GETs are the broker's busiest object-store calls, and their fixed CPU is paid per
request. From SeaweedFS on loopback (``python -m bench bench_s3``), one small ranged GET cost 1.3-1.7
ms of CPU through botocore (hooks, header signing, parsing the response into a dict), 1.1 ms through
urllib3 with a presigned URL (urllib3 parses and percent-encodes the long query of each URL, twice),
and 0.6-0.8 ms here, about 0.15 of it the presigning. Anything but the 206 of a ranged GET or the 200 of a whole one, and any
failure to send, gives None: the caller sends the GET again through botocore, whose retries and
errors apply. The URL is never logged (``http.client`` logs nothing).
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from typing import Any
from urllib.parse import urlsplit

PRESIGNED_FOR_S = 300


class BodyCutShort(http.client.HTTPException):
    """The connection ended before the body's Content-Length."""


class PlainBody:
    """A presigned GET's body: ``read()`` (the rest, in one read) or ``read(n)``. Its connection
    goes back to the pool once every byte was read, and is closed otherwise (unread bytes would be
    taken for the next answer)."""

    def __init__(self, gets: "PresignedGets", origin: tuple[str, str], conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse, length: int) -> None:
        self._gets = gets
        self._origin = origin
        self._conn: http.client.HTTPConnection | None = conn
        self._response = response
        self._left = length

    def read(self, size: int | None = None) -> bytes:
        data = self._response.read() if size is None else self._response.read(min(size, self._left))
        self._left -= len(data)
        if self._left > 0 and (size is None or not data):
            raise BodyCutShort(f"body ended {self._left} bytes short")
        return data

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self._response.close()
        if self._left == 0 and not self._response.will_close:
            self._gets.give_back(self._origin, conn)
        else:
            conn.close()


class PresignedGets:
    """Presigned GETs of one bucket's objects through a boto3 S3 ``client``; thread safe. At most
    ``max_idle`` connections per origin wait between requests; more are opened when more requests
    run at once, and closed after."""

    def __init__(self, client: Any, bucket: str, max_idle: int, timeout_s: float, ca_bundle: str | None) -> None:
        self._client = client  # a boto3 S3 client: it presigns (boto3 has no type information)
        self._bucket = bucket
        self._max_idle = max_idle
        self._timeout_s = timeout_s
        self._ca_bundle = ca_bundle
        self._tls: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str], list[http.client.HTTPConnection]] = {}
        self._closed = False

    def get(self, key: str, byte_range: str | None) -> tuple[PlainBody, int] | None:
        """The body of a GET of ``key`` (``byte_range``: a Range header value) and its length;
        None: send it through botocore."""
        try:
            url = urlsplit(self._client.generate_presigned_url(
                "get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=PRESIGNED_FOR_S))
        except Exception:  # noqa: BLE001 - botocore's path reports what fails
            return None
        origin = (url.scheme, url.netloc)
        headers = {"Host": url.netloc}  # as signed
        if byte_range:
            headers["Range"] = byte_range
        sent = self._send(origin, url.hostname or "", url.port, f"{url.path}?{url.query}", headers)
        if sent is None:
            return None
        conn, response = sent
        length = response.getheader("Content-Length")
        if response.status != (206 if byte_range else 200) or length is None or not length.isdigit():
            conn.close()
            return None
        return PlainBody(self, origin, conn, response, int(length)), int(length)

    def _send(self, origin: tuple[str, str], host: str, port: int | None, target: str,
              headers: dict[str, str]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse] | None:
        """The request sent and its answer's head read, on an idle connection or a new one; None when
        that failed (botocore's path sends it again and reports what fails)."""
        conn = self._take(origin)
        if conn is not None:
            try:
                return conn, _ask(conn, target, headers)
            except _STALE:
                conn.close()  # the server closed it as it was taken: nothing was answered
            except Exception:  # noqa: BLE001
                conn.close()
                return None
        try:
            conn = self._connect(origin[0], host, port)
        except Exception:  # noqa: BLE001 - e.g. an unreadable CA bundle: botocore's path reports it
            return None
        try:
            return conn, _ask(conn, target, headers)
        except Exception:  # noqa: BLE001
            conn.close()
            return None

    def give_back(self, origin: tuple[str, str], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if not self._closed and len(idle) < self._max_idle:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()

    def _take(self, origin: tuple[str, str]) -> http.client.HTTPConnection | None:
        """An idle connection the server has not closed (a server closes idle ones after a while:
        sending on one of those would fail, or worse, be cut while the answer comes)."""
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                conn = idle.pop()
            if not _dropped(conn):
                return conn
            conn.close()

    def _connect(self, scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
        """A connection, not yet open: it connects (and for https verifies the server's certificate
        and name) as the request is sent."""
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context(cafile=self._ca_bundle)
            return http.client.HTTPSConnection(host, port, timeout=self._timeout_s, context=self._tls)
        return http.client.HTTPConnection(host, port, timeout=self._timeout_s)


# how sending on a connection the server has just closed fails, before any answer
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def _ask(conn: http.client.HTTPConnection, target: str, headers: dict[str, str]) -> http.client.HTTPResponse:
    conn.request("GET", target, headers=headers)
    return conn.getresponse()


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection is closed or has bytes waiting (an idle connection has nothing
    to say: bytes or an end of stream mean the server is done with it)."""
    sock = conn.sock
    if sock is None:
        return True
    poller = select.poll()  # select() fails on descriptors above 1023, which a broker has
    try:
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


__all__ = ["PresignedGets", "PlainBody", "BodyCutShort", "PRESIGNED_FOR_S"]
