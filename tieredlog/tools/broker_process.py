"""One broker as a child process: its properties, log file, start, exit status and orderly stop.

Shared by the tools that run several brokers from one command (``tieredlog host``, ``tieredlog
dev-cluster``), with the parsing of their ``--override`` options and the check that a broker has
registered.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tieredlog.clients.blocking import KafkaClient
from tieredlog.tools.cluster_admin import describe_cluster
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


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """``--override KEY=VALUE`` options as a dict; ValueError names the first malformed one."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def registered(broker_id: int, address: str, need_controller: bool = False) -> bool:
    """The broker at ``address`` answers Metadata listing itself among the live brokers (and, with
    ``need_controller``, knowing a controller)."""
    try:
        with KafkaClient(address, timeout=5) as c:
            view = describe_cluster(c, [])
    except Exception:  # noqa: BLE001 - not up yet, whatever it says
        return False
    return broker_id in view.brokers and (view.controller_id >= 0 or not need_controller)


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
