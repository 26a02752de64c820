"""`tieredlog dev-cluster`: a ZooKeeper and N brokers on 127.0.0.1 in one command, for development.

    tieredlog dev-cluster [--brokers 3] [--dir ./cluster] [--base-port 9092] [--zookeeper-port 2181]
                          [--metrics-base-port 9404] [--override KEY=VALUE ...]

ZooKeeper is the server the tests run (tieredlog.tools.zookeeper_server: Debian's zookeeper.jar, a
development configuration) with its data in DIR/zookeeper; broker i (ids 1..N) listens on
base-port + i - 1 with its log dir DIR/broker-i/data and its log in DIR/broker-i.log, and serves
/metrics and its console on metrics-base-port + i - 1. Every
``--override`` goes to every broker. Once every broker is registered and a controller is elected, the
tool prints the bootstrap servers and the ZooKeeper connect string and waits; Ctrl-C or SIGTERM stops
the brokers (each one's orderly shutdown), then ZooKeeper. Running it again on the same DIR brings the
same cluster back with its data. Every process it starts dies with it, even when it is killed outright.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tieredlog.clients.blocking import KafkaClient
from tieredlog.tools.cluster_admin import describe_cluster
from tieredlog.tools.zookeeper_server import ZooKeeperNotAvailable, ZooKeeperServer, die_with_parent

HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0  # a broker's start on a loaded two-core machine, plus the controller election
STOP_TIMEOUT_S = 60.0  # an orderly broker shutdown moves leadership away through the controller first


class DevClusterError(Exception):
    """Start-up failed; the message says why (and where the log is)."""


class Broker:
    def __init__(self, broker_id: int, port: int, base: Path, zk_connect: str, n_brokers: int,
                 overrides: dict[str, str], metrics_port: int = -1) -> None:
        self.broker_id = broker_id
        self.port = port
        self.metrics_port = int(overrides.get("metrics.port", metrics_port))
        self.data_dir = base / f"broker-{broker_id}" / "data"
        self.log_path = base / f"broker-{broker_id}.log"
        self.props = {"zookeeper.connect": zk_connect, "broker.id": str(broker_id),
                      "listeners": f"PLAINTEXT://{HOST}:{port}", "log.dirs": str(self.data_dir),
                      # Kafka's default of 3 would leave consumer groups without a coordinator on a
                      # cluster of one or two brokers (Kafka's own single-broker sample config sets 1)
                      "offsets.topic.replication.factor": str(min(3, n_brokers)),
                      # one metrics port (and console) per broker, as they share the host
                      "metrics.port": str(metrics_port),
                      **overrides}
        self.proc: subprocess.Popen[bytes] | None = None
        self.reported_exit = False

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "tieredlog.cli", "broker"]
        for k, v in self.props.items():
            cmd += ["--override", f"{k}={v}"]
        with open(self.log_path, "ab") as log:
            # its own session: a Ctrl-C in the terminal reaches only us, and we stop the brokers in order
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=die_with_parent)

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def _port_free(port: int) -> bool:
    """Nobody listens on ``port``. SO_REUSEADDR as the servers themselves bind: a port still in TIME_WAIT
    from a cluster just stopped is free to them, a listening one is not."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _parse_overrides(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DevClusterError(f"--override expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _cluster_ready(brokers: list[Broker]) -> bool:
    """Every broker answers and lists every broker, and a controller is elected."""
    want = {b.broker_id for b in brokers}
    for b in brokers:
        try:
            with KafkaClient(b.address, timeout=5) as c:
                view = describe_cluster(c, [])
        except Exception:  # noqa: BLE001 - not up yet, whatever it says
            return False
        if set(view.brokers) != want or view.controller_id not in want:
            return False
    return True


class DevCluster:
    def __init__(self, base: Path, n_brokers: int, base_port: int, zk_port: int, overrides: dict[str, str],
                 metrics_base_port: int = -1) -> None:
        self.base = base
        self.zookeeper = ZooKeeperServer(base / "zookeeper", port=zk_port)
        connect = self.zookeeper.connect
        self.brokers = [Broker(i, base_port + i - 1, base, connect, n_brokers, overrides,
                               metrics_base_port + i - 1 if metrics_base_port >= 0 else -1)
                        for i in range(1, n_brokers + 1)]
        self.stopping = threading.Event()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def start(self) -> None:
        busy = [p for p in [self.zookeeper.port, *(b.port for b in self.brokers)] if not _port_free(p)]
        if busy:
            raise DevClusterError(f"port(s) {', '.join(map(str, busy))} on {HOST} are in use "
                                  "(another cluster? choose --base-port / --zookeeper-port)")
        self.base.mkdir(parents=True, exist_ok=True)
        try:
            self.zookeeper.start()
        except ZooKeeperNotAvailable as exc:
            raise DevClusterError(str(exc)) from exc
        except RuntimeError as exc:
            raise DevClusterError(f"ZooKeeper did not start (log: {self.zookeeper.log_path}): {exc}") from exc
        for b in self.brokers:
            b.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _cluster_ready(self.brokers):
            for b in self.brokers:
                rc = b.exited()
                if rc is not None:
                    raise DevClusterError(f"broker {b.broker_id} exited with code {rc} during start-up "
                                          f"(log: {b.log_path}):\n{b.log_tail()}")
            if self.stopping.is_set():
                raise DevClusterError("stopped during start-up")
            if time.monotonic() >= deadline:
                raise DevClusterError(f"the brokers did not form a cluster within {READY_TIMEOUT_S:.0f} s "
                                      f"(logs: {self.base}/broker-*.log)")
            time.sleep(0.2)

    def describe(self) -> str:
        zk = self.zookeeper
        lines = [f"zookeeper  pid {zk.proc.pid if zk.proc else '-'}  {zk.connect}  log {zk.log_path}"]
        lines += [f"broker {b.broker_id}   pid {b.proc.pid if b.proc else '-'}  {b.address}  log {b.log_path}"
                  + (f"  console http://{HOST}:{b.metrics_port}/console" if b.metrics_port >= 0 else "")
                  for b in self.brokers]
        lines += [f"bootstrap.servers={self.bootstrap}", f"zookeeper.connect={zk.connect}",
                  f"{len(self.brokers)} broker(s) ready; Ctrl-C or SIGTERM stops the cluster."]
        return "\n".join(lines)

    def watch(self) -> None:
        """Until asked to stop: say so once when a broker exits on its own (the others keep running)."""
        while not self.stopping.wait(0.5):
            for b in self.brokers:
                rc = b.exited()
                if rc is not None and not b.reported_exit:
                    b.reported_exit = True
                    print(f"broker {b.broker_id} exited with code {rc} (log: {b.log_path})", flush=True)

    def stop(self) -> None:
        """SIGTERM to every broker (each shuts down in order on its own), wait, SIGKILL what is left;
        ZooKeeper last, so the brokers can still close their sessions."""
        running = [b.proc for b in self.brokers if b.proc is not None and b.proc.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.zookeeper.stop()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog dev-cluster",
                                description="Run a ZooKeeper and N brokers on 127.0.0.1 until Ctrl-C or SIGTERM.")
    p.add_argument("--brokers", type=int, default=3, help="how many brokers (ids 1..N), default 3")
    p.add_argument("--dir", default="./cluster", help="where the data and logs go, default ./cluster")
    p.add_argument("--base-port", type=int, default=9092, help="broker i listens on base-port + i - 1")
    p.add_argument("--metrics-base-port", type=int, default=9404,
                   help="broker i serves /metrics and its console on metrics-base-port + i - 1 (-1: none)")
    p.add_argument("--zookeeper-port", type=int, default=2181)
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="a broker config for every broker")
    return p


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if a.brokers < 1:
        print("tieredlog dev-cluster: --brokers must be at least 1", file=sys.stderr)
        return 2
    try:
        overrides = _parse_overrides(a.override)
    except DevClusterError as exc:
        print(f"tieredlog dev-cluster: {exc}", file=sys.stderr)
        return 2
    cluster = DevCluster(Path(a.dir).resolve(), a.brokers, a.base_port, a.zookeeper_port, overrides,
                         a.metrics_base_port)

    def on_signal(_signum: int, _frame: Any) -> None:
        cluster.stopping.set()

    # installed before anything starts: a signal during start-up still stops what was started
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rc = 0
    try:
        cluster.start()
        print(cluster.describe(), flush=True)
        cluster.watch()
        print("stopping the cluster", flush=True)
    except DevClusterError as exc:
        print(f"tieredlog dev-cluster: {exc}", file=sys.stderr)
        rc = 1
    finally:
        cluster.stop()
    if rc == 0:
        print("stopped", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
