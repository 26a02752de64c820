"""One broker process of `tieredlog dev-cluster`: its configs, and starting, stopping and killing it.

The supervisor (dev_cluster.py) owns these objects; every change of a broker's process goes through
its lock, so the watch loop, the control channel and the cluster's shutdown never race on one broker.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

from tieredlog.tools.broker_process import STOP_TIMEOUT_S, BrokerProcess, registered

HOST = "127.0.0.1"


class DevBroker(BrokerProcess):
    def __init__(self, broker_id: int, port: int, base: Path, props: dict[str, str]) -> None:
        self.port = port
        self.data_dir = base / f"broker-{broker_id}" / "data"
        super().__init__(broker_id, {"broker.id": str(broker_id), "listeners": f"PLAINTEXT://{HOST}:{port}",
                                     "log.dirs": str(self.data_dir), **props},
                         base / f"broker-{broker_id}.log")
        # True once the supervisor stopped or killed it on request: the watch loop then says nothing
        self.exit_expected = False
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

    def start(self) -> None:
        """Start the process (the caller must be a long-lived thread: PR_SET_PDEATHSIG fires when the
        thread that forked the child ends, not only the process)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        super().start()
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
        return registered(self.broker_id, self.address, need_controller=True)

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
