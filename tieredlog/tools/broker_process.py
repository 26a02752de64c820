"""One broker as a child process: its properties, log file, start, exit status and orderly stop.

Shared by the tools that run several brokers from one command (``tieredlog host``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tieredlog.tools.zookeeper_server import die_with_parent

STOP_TIMEOUT_S = 60.0  # an orderly broker shutdown moves leadership away through the controller first


class BrokerProcess:
    def __init__(self, broker_id: int, props: dict[str, str], log_path: Path, config_file: str | None = None) -> None:
        self.broker_id = broker_id
        self.props = props
        # passed by path: its secrets (key store passwords, SASL) never show on a command line
        self.config_file = config_file
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.reported_exit = False

    def start(self) -> None:
        cmd = [sys.executable, "-m", "tieredlog.cli", "broker"]
        if self.config_file is not None:
            cmd += ["--config", self.config_file]
        for k, v in self.props.items():
            cmd += ["--override", f"{k}={v}"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # its own session: a Ctrl-C in the terminal reaches only the parent, which stops the
            # brokers in order; the broker dies with the parent even when that is killed outright
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=die_with_parent)

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def stop_all(brokers: list[BrokerProcess], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to every broker at once (each shuts down in order on its own), wait, SIGKILL what is left."""
    running = [b.proc for b in brokers if b.proc is not None and b.proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
