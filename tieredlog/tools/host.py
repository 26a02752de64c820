"""`tieredlog host`: one broker per core of this host, run and stopped as one service.

    tieredlog host --zookeeper-connect ZK [--brokers N] [--first-broker-id 1] [--base-port 9092]
                   [--dir /var/lib/tieredlog] [--config server.properties] [--rack NAME]
                   [--listen-host 0.0.0.0] [--advertised-host NAME] [--override KEY=VALUE ...]

A broker process runs one event loop on one core; a host with more cores runs more brokers. Broker i
(0-based) gets broker.id = first-broker-id + i, listens on base-port + i, keeps its log dir in
DIR/broker-<id>/data and its log in DIR/broker-<id>.log. Every broker gets ``broker.rack`` = the host
name (or --rack), so rack-aware replica placement puts the replicas of a partition on different
hosts. The brokers of every host form one cluster through ZooKeeper (``zookeeper.connect``). The
command stays in the foreground until SIGTERM or Ctrl-C, then stops every broker (each one's orderly
shutdown) and exits; a broker that dies on its own is reported and the others keep serving.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.tools.broker_process import BrokerProcess, parse_overrides, registered, stop_all

READY_TIMEOUT_S = 90.0  # a broker's start on a loaded machine, plus its ZooKeeper registration


class HostError(Exception):
    """Start-up failed; the message says why (and where the log is)."""


def default_brokers() -> int:
    """One broker per core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def broker_props(a: argparse.Namespace, index: int, base: Path, overrides: dict[str, str]) -> dict[str, str]:
    """What differs between the brokers of a host (and what the host decides); the rest comes from
    --config, which every broker reads itself."""
    broker_id = a.first_broker_id + index
    port = a.base_port + index
    advertised = a.advertised_host or socket.getfqdn()
    return {"broker.id": str(broker_id),
            "zookeeper.connect": a.zookeeper_connect,
            "broker.rack": a.rack or socket.gethostname(),
            "listeners": f"PLAINTEXT://{a.listen_host}:{port}",
            "advertised.listeners": f"PLAINTEXT://{advertised}:{port}",
            "log.dirs": str(base / f"broker-{broker_id}" / "data"),
            **overrides}


def _check_config(path: str | None) -> str | None:
    """The --config file as an absolute path, once it loads as a broker config."""
    if path is None:
        return None
    try:
        BrokerConfig.load(path, warn=False)
    except (OSError, BrokerConfigError) as exc:
        raise HostError(f"invalid configuration {path}: {exc}") from exc
    return str(Path(path).resolve())


def _overrides(items: list[str] | None) -> dict[str, str]:
    try:
        return parse_overrides(items)
    except ValueError as exc:
        raise HostError(str(exc)) from None


class Host:
    def __init__(self, brokers: list[BrokerProcess], addresses: list[str]) -> None:
        self.brokers = brokers
        self.addresses = addresses
        self.stopping = threading.Event()

    def start(self) -> None:
        for b in self.brokers:
            b.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        pending = list(zip(self.brokers, self.addresses))
        while pending:
            for b, _ in pending:
                rc = b.exited()
                if rc is not None:
                    raise HostError(f"broker {b.broker_id} exited with code {rc} during start-up "
                                    f"(log: {b.log_path}):\n{b.log_tail()}")
            if self.stopping.is_set():
                raise HostError("stopped during start-up")
            if time.monotonic() >= deadline:
                raise HostError(f"broker(s) {', '.join(str(b.broker_id) for b, _ in pending)} did not register "
                                f"within {READY_TIMEOUT_S:.0f} s (logs beside their data)")
            pending = [(b, addr) for b, addr in pending if not registered(b.broker_id, addr)]
            if pending:
                time.sleep(0.2)

    def watch(self) -> None:
        while not self.stopping.wait(0.5):
            for b in self.brokers:
                rc = b.exited()
                if rc is not None and not b.reported_exit:
                    b.reported_exit = True
                    print(f"broker {b.broker_id} exited with code {rc} (log: {b.log_path})", flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog host",
                                description="Run one broker per core of this host until SIGTERM or Ctrl-C.")
    p.add_argument("--zookeeper-connect", required=True, help="the cluster's zookeeper.connect")
    p.add_argument("--brokers", type=int, default=default_brokers(), help="how many brokers, default one per core")
    p.add_argument("--first-broker-id", type=int, default=1,
                   help="broker i gets this + i; give every host its own range")
    p.add_argument("--base-port", type=int, default=9092, help="broker i listens on base-port + i")
    p.add_argument("--dir", default="./host", help="the brokers' log dirs and logs, default ./host")
    p.add_argument("--config", help="server.properties every broker starts from (Kafka property names)")
    p.add_argument("--rack", help="broker.rack of every broker, default the host name")
    p.add_argument("--listen-host", default="0.0.0.0", help="the listeners' bind address, default every interface")
    p.add_argument("--advertised-host", help="the host name clients connect to, default this host's FQDN")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="a broker config for every broker")
    return p


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if a.brokers < 1:
        print("tieredlog host: --brokers must be at least 1", file=sys.stderr)
        return 2
    base = Path(a.dir).resolve()
    try:
        config_file = _check_config(a.config)
        overrides = _overrides(a.override)
    except HostError as exc:
        print(f"tieredlog host: {exc}", file=sys.stderr)
        return 2
    props = [broker_props(a, i, base, overrides) for i in range(a.brokers)]
    brokers = [BrokerProcess(int(p["broker.id"]), p, base / f"broker-{p['broker.id']}.log", config_file)
               for p in props]
    connect_host = "127.0.0.1" if a.listen_host in ("0.0.0.0", "::", "") else a.listen_host
    host = Host(brokers, [f"{connect_host}:{a.base_port + i}" for i in range(a.brokers)])

    def on_signal(_signum: int, _frame: Any) -> None:
        host.stopping.set()

    # installed before anything starts: a signal during start-up still stops what was started
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rc = 0
    try:
        host.start()
        for b, addr in zip(brokers, host.addresses):
            print(f"broker {b.broker_id}  pid {b.proc.pid if b.proc else '-'}  {addr}  rack "
                  f"{b.props['broker.rack']}  log {b.log_path}", flush=True)
        print(f"{len(brokers)} broker(s) registered; SIGTERM or Ctrl-C stops them all.", flush=True)
        host.watch()
        print("stopping the brokers", flush=True)
    except HostError as exc:
        print(f"tieredlog host: {exc}", file=sys.stderr)
        rc = 1
    finally:
        stop_all(brokers)
    if rc == 0:
        print("stopped", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
