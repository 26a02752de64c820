"""One broker process of `tieredlog dev-cluster`: its configs, and starting, stopping and killing it.

The supervisor (dev_cluster.py) owns these objects; every change of a broker's process goes through
its lock, so the watch loop, the control channel and the cluster's shutdown never race on one broker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tieredlog.clients.blocking import KafkaClient
from tieredlog.tools.cluster_admin import describe_cluster
from tieredlog.tools.zookeeper_server import die_with_parent

HOST = "127.0.0.1"
STOP_TIMEOUT_S = 60.0  # an orderly broker shutdown moves leadership away through the controller first


class DevBroker:
    def __init__(self, broker_id: int, port: int, base: Path, props: dict[str, str]) -> None:
        self.broker_id = broker_id
        self.port = port
        self.data_dir = base / f"broker-{broker_id}" / "data"
        self.log_path = base / f"broker-{broker_id}.log"
        self.props = {"broker.id": str(broker_id), "listeners": f"PLAINTEXT://{HOST}:{port}",
                      "log.dirs": str(self.data_dir), **props}
        self.proc: subprocess.Popen[bytes] | None = None
        # True once the supervisor stopped or killed it on request: the watch loop then says nothing
        self.exit_expected = False
        self.reported_exit = False
        self.lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        port = int(self.props.get("metrics.port", "-1"))
        return f"http://{self.props.get('metrics.host', HOST)}:{port}/metrics" if port > 0 else None

    @property
    def console_url(self) -> str | None:
        url = self.metrics_url
        return url[: -len("/metrics")] + "/console" if url else None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def start(self) -> None:
        """Start the process (the caller must be a long-lived thread: PR_SET_PDEATHSIG fires when the
        thread that forked the child ends, not only the process)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "tieredlog.cli", "broker"]
        for k, v in self.props.items():
            cmd += ["--override", f"{k}={v}"]
        with open(self.log_path, "ab") as log:
            # its own session: a Ctrl-C in the terminal reaches only the supervisor, which stops the
            # brokers in order
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=die_with_parent)
        self.exit_expected = False
        self.reported_exit = False

    def signal(self, signum: int) -> None:
        """Send ``signum`` if the process runs; its exit is then expected."""
        if self.proc is not None and self.proc.poll() is None:
            self.exit_expected = True
            self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """Wait for the exit; SIGKILL if it takes longer than ``timeout``. The exit code."""
        assert self.proc is not None
        try:
            return self.proc.wait(max(0.1, timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (the broker's controlled shutdown), then wait. None if it was not running."""
        if not self.running():
            return None
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> int | None:
        """SIGKILL, as `kill -9`: no controlled shutdown, the ZooKeeper session expires on its own."""
        if not self.running():
            return None
        self.signal(signal.SIGKILL)
        return self.wait(10.0)

    def registered(self) -> bool:
        """It answers Metadata, lists itself among the live brokers and knows a controller."""
        try:
            with KafkaClient(self.address, timeout=5) as c:
                view = describe_cluster(c, [])
        except Exception:  # noqa: BLE001 - not up yet, whatever it says
            return False
        return self.broker_id in view.brokers and view.controller_id >= 0

    def wait_registered(self, timeout: float, stopping: threading.Event) -> str | None:
        """None once registered, else why not (it exited, the cluster is stopping, time ran out)."""
        deadline = time.monotonic() + timeout
        while not self.registered():
            rc = self.exited()
            if rc is not None:
                return f"broker {self.broker_id} exited with code {rc} during start-up (log: {self.log_path}):\n{self.log_tail()}"
            if stopping.is_set():
                return "the cluster is stopping"
            if time.monotonic() >= deadline:
                return (f"broker {self.broker_id} did not register within {timeout:.0f} s "
                        f"(log: {self.log_path})")
            time.sleep(0.2)
        return None

    def state(self) -> str:
        rc = self.exited()
        if self.proc is None:
            return "stopped"
        if rc is None:
            return f"running  pid {self.proc.pid}"
        return f"stopped  (exit code {rc})"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""
