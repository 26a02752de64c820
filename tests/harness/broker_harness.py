"""Start a real `tieredlog broker` subprocess for integration tests.

    b = BrokerProcess(tmp_path / "data", overrides={"num.partitions": "3"}).start()
    b.bootstrap            # "127.0.0.1:<free port>"
    b.restart()            # SIGTERM, wait, start again on the same port and data dir
    b.kill9(); b.start()   # crash and recover
    b.stop()               # SIGTERM; returns the exit code
    b.log_text()           # the broker's stderr so far (attach it to assertion messages)

    BrokerProcess(d, extra_listeners={"SSL": free_port()})   # PLAINTEXT (waited on) plus an SSL listener
    b.address("SSL")       # "127.0.0.1:<its port>"

The pytest fixtures in tests/conftest.py wrap this: `broker` (one per test module) and
`broker_factory` (as many as a test wants, all stopped at the end).
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

from helpers import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when something on host:port answers an ApiVersions v0 request with error 0."""
    req = struct.pack(">hhih", 18, 0, 1, 7) + b"harness"
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(req)) + req)
            head = s.recv(4)
            if len(head) < 4:
                return False
            size = struct.unpack(">i", head)[0]
            data = b""
            while len(data) < size:
                chunk = s.recv(size - len(data))
                if not chunk:
                    return False
                data += chunk
            return struct.unpack(">ih", data[:6]) == (1, 0)
    except OSError:
        return False


class BrokerProcess:
    def __init__(
        self,
        data_dir: str | os.PathLike,
        overrides: Mapping[str, str] | None = None,
        port: int | None = None,
        config_file: str | os.PathLike | None = None,
        extra_listeners: Mapping[str, int] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.overrides = dict(overrides or {})
        # listener name -> port, bound beside the PLAINTEXT listener the harness waits on
        self.extra_listeners = dict(extra_listeners or {})
        self.config_file = config_file
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def address(self, listener: str) -> str:
        """host:port of a listener (PLAINTEXT or one of ``extra_listeners``)."""
        return self.bootstrap if listener == "PLAINTEXT" else f"{self.host}:{self.extra_listeners[listener]}"

    @property
    def listeners(self) -> str:
        return ",".join(f"{name}://{self.host}:{port}"
                        for name, port in {"PLAINTEXT": self.port, **self.extra_listeners}.items())

    def command(self) -> list[str]:
        # The last broker of a test cluster has nowhere to move its leaderships: Kafka's 3 x 5 s of
        # controlled-shutdown retries would add 15 s to every cluster test's teardown.
        quick = {} if self.config_file else {"controlled.shutdown.retry.backoff.ms": "200"}
        # no metrics endpoint unless a test asks for one: parallel brokers would all want port 9404
        quiet = {} if self._file_sets("metrics.port") else {"metrics.port": "-1"}
        props = {"listeners": self.listeners, "log.dirs": str(self.data_dir), **quiet, **quick, **self.overrides}
        cmd = [sys.executable, "-m", "tieredlog.cli", "broker"]
        if self.config_file:
            cmd += ["--config", str(self.config_file)]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def _file_sets(self, name: str) -> bool:
        if not self.config_file:
            return False
        lines = Path(self.config_file).read_text().splitlines()
        return any(line.split("=", 1)[0].strip() == name for line in lines)

    def start(self, timeout: float = START_TIMEOUT_S) -> "BrokerProcess":
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_text()}")
            if api_versions_ok(self.host, self.port):
                return self
            time.sleep(0.05)
        self.kill9()
        raise RuntimeError(f"broker did not answer within {timeout}s:\n{self.log_text()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; a broker that does not exit in time is killed (and that is returned as -9)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
