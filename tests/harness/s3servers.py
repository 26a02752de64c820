"""Real S3 servers on loopback for tests: moto's server mode and SeaweedFS (``weed mini``).

Usage in a test module (run pytest from the repo root, as ``make test`` does)::

    from s3servers import moto_s3, seaweed_s3   # noqa: F401  (pytest fixtures)

    def test_something(moto_s3):
        client = moto_s3.client()                       # boto3 client, path style
        configs = moto_s3.rsm_configs(prefix="t1/")     # configs for S3RemoteStorageManager
        bucket = moto_s3.new_bucket()                   # a fresh bucket when sharing is not enough

Both fixtures are session scoped and each server process is shared by every module that imports the
fixture (reference counted), so a whole run starts at most one of each. Each server has the bucket
``tieredlog`` created; tests isolate themselves with their own key prefix or ``new_bucket()``.
Credentials are fixed test values (SeaweedFS checks them; moto accepts anything).
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import boto3
import pytest
from botocore.config import Config
from helpers import free_port

from tieredlog.tools import dev_cluster_s3

ACCESS_KEY = "tieredlog"
SECRET_KEY = "tieredlog-secret"
REGION = "us-east-1"
BUCKET = "tieredlog"
WEED = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "weed"
if not WEED.exists() and shutil.which("weed"):
    WEED = Path(shutil.which("weed"))  # type: ignore[arg-type]


@dataclass
class S3Endpoint:
    """Where a running server listens, with the credentials and bucket it was set up with."""

    name: str
    url: str
    bucket: str = BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def client(self, **config):
        return boto3.client(
            "s3", endpoint_url=self.url, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                          response_checksum_validation="when_required", **config),
        )

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name

    def rsm_configs(self, prefix: str = "", bucket: str | None = None, **extra: object) -> dict[str, object]:
        """Configs for ``S3RemoteStorageManager.configure`` (``rsm.config.`` already stripped)."""
        configs: dict[str, object] = {
            "storage.s3.bucket.name": bucket or self.bucket,
            "key.prefix": prefix,
            "storage.s3.endpoint.url": self.url,
            "storage.s3.region": self.region,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": self.access_key,
            "storage.aws.secret.access.key": self.secret_key,
        }
        configs.update(extra)
        return configs

    def fsspec_options(self) -> dict[str, object]:
        """``storage.fsspec.options.*`` entries for s3fs against this server."""
        return {
            "storage.fsspec.options.key": self.access_key,
            "storage.fsspec.options.secret": self.secret_key,
            "storage.fsspec.options.endpoint_url": self.url,
            "storage.fsspec.options.client_kwargs.region_name": self.region,
        }




def wait_for_bucket(endpoint: S3Endpoint, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    client = endpoint.client(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5)
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{endpoint.name} exited with {proc.returncode} before serving")
        try:
            client.head_bucket(Bucket=endpoint.bucket)
            return
        except Exception as exc:  # not up yet, or the bucket is not created yet
            last = exc
            time.sleep(0.2)
    raise RuntimeError(f"{endpoint.name} at {endpoint.url} did not serve bucket {endpoint.bucket}: {last!r}")


def _server_process(name: str, workdir: Path, command: list[str], port: int,
                    ready: Callable[[S3Endpoint, subprocess.Popen], None]) -> S3Endpoint:
    """Run ``command`` (an S3 server on ``port``) with its output in ``workdir``; its endpoint once
    ``ready`` returns. Stopping it ends the process and removes ``workdir``; a server that does not
    get ready is stopped, and the error carries its log's tail."""
    log_path = workdir / f"{name}.log"
    logfile = log_path.open("wb")
    proc = subprocess.Popen(command, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logfile.close()
        shutil.rmtree(workdir, ignore_errors=True)

    endpoint = S3Endpoint(name, f"http://127.0.0.1:{port}", _stop=stop)
    try:
        ready(endpoint, proc)
    except Exception as exc:
        tail = log_path.read_bytes()[-2000:].decode(errors="replace")
        stop()
        raise RuntimeError(f"{name} did not start: {exc!r}; log tail:\n{tail}") from None
    return endpoint


def _create_bucket(endpoint: S3Endpoint, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Create the endpoint's bucket as soon as the server listens."""
    client = endpoint.client(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.create_bucket(Bucket=endpoint.bucket)
            return
        except Exception:  # not listening yet
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def start_moto() -> S3Endpoint:
    """moto's server mode in a process of its own: its state, its threads and its locks apart from the
    test process (an in-process server shares the test process's GIL and moto's global backends with
    every test that ran before)."""
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="tieredlog-moto-"))
    return _server_process("moto", workdir, [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                           port, _create_bucket)


def seaweed_command(data_dir: Path, s3_port: int, config_file: Path, bucket: str = BUCKET) -> list[str]:
    """The dev cluster's ``weed mini`` command (every listener on a free loopback port) with this WEED."""
    return dev_cluster_s3.seaweed_command(str(WEED), data_dir, s3_port, config_file, bucket)


def write_seaweed_identity(path: Path, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> None:
    dev_cluster_s3.write_seaweed_identity(path, access_key, secret_key)


def start_seaweedfs() -> S3Endpoint:
    workdir = Path(tempfile.mkdtemp(prefix="tieredlog-weed-"))
    (workdir / "data").mkdir()
    config = workdir / "s3.json"
    write_seaweed_identity(config)
    port = free_port()
    return _server_process("seaweedfs", workdir, seaweed_command(workdir / "data", port, config), port,
                           lambda endpoint, proc: wait_for_bucket(endpoint, proc=proc))


class _Shared:
    """One server per process, started on first use and stopped when the last user releases it."""

    def __init__(self, start: Callable[[], S3Endpoint]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._users = 0
        self._endpoint: S3Endpoint | None = None

    def acquire(self) -> S3Endpoint:
        with self._lock:
            if self._endpoint is None:
                self._endpoint = self._start()
            self._users += 1
            return self._endpoint

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._endpoint is not None:
                stop, self._endpoint = self._endpoint._stop, None
                if stop is not None:
                    stop()


_MOTO = _Shared(start_moto)
_SEAWEED = _Shared(start_seaweedfs)


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[S3Endpoint]:
    endpoint = _MOTO.acquire()
    try:
        yield endpoint
    finally:
        _MOTO.release()


@pytest.fixture(scope="session")
def seaweed_s3() -> Iterator[S3Endpoint]:
    endpoint = _SEAWEED.acquire()
    try:
        yield endpoint
    finally:
        _SEAWEED.release()


@pytest.fixture(params=["moto", "seaweedfs"])
def any_s3(request) -> S3Endpoint:
    """Runs the test once against each server."""
    return request.getfixturevalue("moto_s3" if request.param == "moto" else "seaweed_s3")


def unique_prefix() -> str:
    return f"p{uuid.uuid4().hex[:12]}/"


os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")  # never probe 169.254.169.254 from tests


# -- a fault-injecting HTTP proxy in front of a real server -------------------------------------------

import http.client  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402


@dataclass
class SeenRequest:
    method: str
    path: str  # path and query, as sent
    headers: dict[str, str]


class FaultyS3Proxy:
    """Forwards every request to ``upstream`` unless ``fault(request)`` returns an HTTP status, in
    which case it answers with that status and an S3 error body. Records every request it sees.
    Use it to test retries, throttling and failure paths against a real server::

        with FaultyS3Proxy(moto_s3.url) as proxy:
            proxy.fault = lambda r: 503 if r.method == "GET" else None
            configs = moto_s3.rsm_configs(**{"storage.s3.endpoint.url": proxy.url})

    ``cut(request)`` returning a byte count sends only that much of the body (with the whole
    body's Content-Length) and closes the connection; ``close_after_answer`` closes every
    connection after its answer without saying so (a server's idle timeout); ``tls`` (a PEM file
    holding a key and its certificate chain) serves HTTPS.
    """

    ERROR_CODES = {500: "InternalError", 503: "SlowDown", 429: "SlowDown", 403: "AccessDenied", 404: "NoSuchKey"}

    def __init__(self, upstream: str, tls: Path | None = None) -> None:
        self.upstream = urlsplit(upstream)
        self.requests: list[SeenRequest] = []
        self.fault: Callable[[SeenRequest], int | None] = lambda request: None
        self.cut: Callable[[SeenRequest], int | None] = lambda request: None
        self.close_after_answer = False
        self.connections = 0  # accepted so far
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = SeenRequest(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
                with proxy._lock:
                    proxy.requests.append(seen)
                    status = proxy.fault(seen)
                if status is not None:
                    code = proxy.ERROR_CODES.get(status, "InternalError")
                    payload = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "expect")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    with proxy._lock:
                        cut = proxy.cut(seen)
                    if cut is not None:
                        data = data[:cut]
                        self.close_connection = True
                    if self.command != "HEAD":
                        self.wfile.write(data)
                    if proxy.close_after_answer:
                        self.close_connection = True
                finally:
                    conn.close()

            def setup(self) -> None:
                with proxy._lock:
                    proxy.connections += 1
                super().setup()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def seen(self, method: str | None = None, contains: str = "") -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.requests if (method is None or r.method == method) and contains in r.path]

    def __enter__(self) -> "FaultyS3Proxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def store_down(request: SeenRequest) -> int | None:
    """A ``FaultyS3Proxy.fault`` for an outage: the broker checks its bucket once at start-up (HEAD),
    every request after that fails with 503."""
    return None if request.method == "HEAD" else 503


@pytest.fixture
def faulty_moto(moto_s3: S3Endpoint) -> Iterator[FaultyS3Proxy]:
    """A FaultyS3Proxy in front of moto's server, passing everything until a test sets its fault."""
    with FaultyS3Proxy(moto_s3.url) as p:
        yield p
