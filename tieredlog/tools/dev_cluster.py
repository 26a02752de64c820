"""`tieredlog dev-cluster`: a ZooKeeper, a shared remote tier and N brokers on 127.0.0.1 in one command,
for development, and commands that stop, kill and start one broker of it while the others run.

    tieredlog dev-cluster [--brokers 3] [--dir ./cluster] [--base-port 9092] [--zookeeper-port 2181]
                          [--metrics-port 9404] [--remote folder|s3] [--s3-server auto|seaweedfs|moto]
                          [--s3-port 8333] [--override KEY=VALUE ...]
    tieredlog dev-cluster stop|kill|start|restart --broker N [--dir ./cluster]
    tieredlog dev-cluster status [--broker N] [--dir ./cluster]

ZooKeeper is the server the tests run (tieredlog.tools.zookeeper_server) with its data in
DIR/zookeeper; broker i (ids 1..N) listens on base-port + i - 1, serves its metrics on
metrics-port + i - 1, keeps its log dir in DIR/broker-i/data and its log in DIR/broker-i.log. Every
broker tiers to the same store, as every broker of a Kafka cluster must: the folder
DIR/remote-storage, or with ``--remote s3`` one bucket of a local S3 server (dev_cluster_s3.py).
Every ``--override`` goes to every broker, after the cluster's own settings. Once every broker is
registered and a controller is elected, the tool prints the endpoints and the control commands and
waits; Ctrl-C or SIGTERM stops the brokers (each one's orderly shutdown), then the S3 server and
ZooKeeper. Running it again on the same DIR brings the same cluster back with its data. Every process
it starts dies with it, even when it is killed outright. The control commands reach it through
DIR/dev-cluster.control (dev_cluster_control.py).
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.tools.broker_process import STOP_TIMEOUT_S, parse_overrides
from tieredlog.tools.cluster_admin import describe_cluster
from tieredlog.tools.dev_cluster_broker import DevBroker
from tieredlog.tools.dev_cluster_control import COMMANDS, ControlError, ControlServer, running_supervisor, send
from tieredlog.tools.dev_cluster_s3 import BUCKET, LocalS3Server, S3ServerNotAvailable, available_kind, port_free
from tieredlog.tools.zookeeper_server import ZooKeeperNotAvailable, ZooKeeperServer

HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0  # a broker's start on a loaded two-core machine, plus the controller election
SETTINGS_FILE = "dev-cluster.json"
# Development settings every broker gets unless --override says otherwise: a SIGKILLed broker's
# session expires (and its partitions get new leaders) in 6 s instead of 18; the tiering and
# local-retention tasks run every 5 s instead of every 30 s and 5 min, so tiering shows within seconds;
# a controlled shutdown that cannot move a leadership (every broker stopping at once) retries after
# 1 s instead of 5, so stopping the whole cluster takes seconds, not half a minute.
DEV_BROKER_DEFAULTS = {
    "zookeeper.session.timeout.ms": "6000",
    "remote.log.manager.task.interval.ms": "5000",
    "log.retention.check.interval.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "1000",
}


class DevClusterError(Exception):
    """Start-up failed; the message says why (and where the log is)."""


def _parse_overrides(items: list[str] | None) -> dict[str, str]:
    try:
        return parse_overrides(items)
    except ValueError as exc:
        raise DevClusterError(str(exc)) from None


def _check_settings(base: Path, remote: str) -> None:
    """A DIR keeps the remote tier it was created with: its brokers' metadata names segments there."""
    path = base / SETTINGS_FILE
    try:
        before = json.loads(path.read_text()).get("remote")
    except (OSError, ValueError, AttributeError):
        before = None
    if before is not None and before != remote:
        where = f"{base}/remote-storage" if before == "folder" else "an S3 bucket"
        raise DevClusterError(f"{base} holds a cluster whose remote tier is {where} (--remote {before}); "
                              f"run it with --remote {before}, or use another --dir")
    base.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"remote": remote}) + "\n")


class DevCluster:
    def __init__(self, base: Path, n_brokers: int, base_port: int, zk_port: int, metrics_port: int,
                 s3: LocalS3Server | None, overrides: dict[str, str]) -> None:
        self.base = base
        self.zookeeper = ZooKeeperServer(base / "zookeeper", port=zk_port)
        self.s3 = s3
        remote = s3.broker_props() if s3 is not None else {"rsm.config.dir": str(base / "remote-storage")}
        self.brokers = []
        for i in range(1, n_brokers + 1):
            props = {"zookeeper.connect": self.zookeeper.connect,
                     # Kafka's default of 3 would leave consumer groups without a coordinator on a
                     # cluster of one or two brokers (Kafka's own single-broker sample config sets 1)
                     "offsets.topic.replication.factor": str(min(3, n_brokers)),
                     **DEV_BROKER_DEFAULTS, **remote,
                     "metrics.port": str(metrics_port + i - 1) if metrics_port > 0 else "-1",
                     **overrides}
            self.brokers.append(DevBroker(i, base_port + i - 1, base, props))
        self.stopping = threading.Event()
        self.control: ControlServer | None = None
        self._reported: set[str] = set()
        # PR_SET_PDEATHSIG follows the thread that forks: processes are started on the main thread only
        self._jobs: queue.Queue[tuple[Callable[[], None], Future[None]]] = queue.Queue()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def ports(self) -> list[int]:
        ports = [self.zookeeper.port, *(b.port for b in self.brokers)]
        ports += [int(b.props["metrics.port"]) for b in self.brokers if int(b.props.get("metrics.port", "-1")) > 0]
        return ports + ([self.s3.port] if self.s3 is not None else [])

    def start(self) -> None:
        pid = running_supervisor(self.base)
        if pid is not None:
            raise DevClusterError(f"a dev-cluster (pid {pid}) is already running on {self.base}")
        busy = [p for p in self.ports() if not port_free(p)]
        if busy:
            raise DevClusterError(f"port(s) {', '.join(map(str, busy))} on {HOST} are in use (another cluster? "
                                  "choose --base-port / --zookeeper-port / --metrics-port / --s3-port)")
        self.base.mkdir(parents=True, exist_ok=True)
        try:
            self.zookeeper.start()
        except ZooKeeperNotAvailable as exc:
            raise DevClusterError(str(exc)) from exc
        except RuntimeError as exc:
            raise DevClusterError(f"ZooKeeper did not start (log: {self.zookeeper.log_path}): {exc}") from exc
        if self.s3 is not None:
            try:
                self.s3.start()
            except RuntimeError as exc:
                raise DevClusterError(str(exc)) from exc
        why = self._wait_registrations_gone(self.brokers)  # a cluster whose dev-cluster was killed outright
        if why is not None:
            raise DevClusterError(why)
        for b in self.brokers:
            b.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._ready():
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
        self.control = ControlServer(self.base, self.handle)
        self.control.start()

    def _ready(self) -> bool:
        """Every broker answers and lists every broker, and a controller is elected."""
        want = {b.broker_id for b in self.brokers}
        for b in self.brokers:
            try:
                with KafkaClient(b.address, timeout=5) as c:
                    view = describe_cluster(c, [])
            except Exception:  # noqa: BLE001 - not up yet, whatever it says
                return False
            if set(view.brokers) != want or view.controller_id not in want:
                return False
        return True

    def remote_line(self) -> str:
        if self.s3 is None:
            return f"remote tier: the folder {self.base / 'remote-storage'}, shared by every broker"
        kept = f"objects kept in {self.s3.base}" if self.s3.kind == "seaweedfs" else \
            "objects in memory, lost when the cluster stops"
        state = f"pid {self.s3.proc.pid}" if self.s3.proc is not None else "not started"
        if self.s3.proc is not None and self.s3.proc.poll() is not None:
            state = f"EXITED with code {self.s3.proc.returncode}"
        return (f"remote tier: S3 bucket {BUCKET} at {self.s3.url}, shared by every broker "
                f"({self.s3.name} {state}, {kept}, log {self.s3.log_path})")

    def describe(self, tool: str) -> str:
        zk = self.zookeeper
        lines = [f"zookeeper  pid {zk.proc.pid if zk.proc else '-'}  {zk.connect}  log {zk.log_path}",
                 self.remote_line()]
        for b in self.brokers:
            metrics = f"  metrics {b.metrics_url}  console {b.console_url}" if b.metrics_url else ""
            lines.append(f"broker {b.broker_id}   pid {b.pid or '-'}  {b.address}{metrics}  log {b.log_path}")
        d = f"--dir {self.base}"
        lines += [f"bootstrap.servers={self.bootstrap}", f"zookeeper.connect={zk.connect}",
                  f"{len(self.brokers)} broker(s) ready; Ctrl-C or SIGTERM stops the cluster. One broker at a time, "
                  "from another terminal:",
                  f"  {tool} dev-cluster kill --broker 2 {d}       # kill -9",
                  f"  {tool} dev-cluster stop --broker 2 {d}       # controlled shutdown",
                  f"  {tool} dev-cluster start --broker 2 {d}",
                  f"  {tool} dev-cluster restart --broker 2 {d}",
                  f"  {tool} dev-cluster status {d}"]
        return "\n".join(lines)

    def status(self, broker_id: int | None) -> str:
        brokers = [b for b in self.brokers if broker_id is None or b.broker_id == broker_id]
        lines = []
        if broker_id is None:
            zk = self.zookeeper
            lines.append(f"zookeeper  {'running  pid ' + str(zk.proc.pid) if zk.is_running() and zk.proc else 'stopped'}"
                         f"  {zk.connect}")
            lines.append(self.remote_line())
        for b in brokers:
            metrics = f"  metrics {b.metrics_url}" if b.metrics_url and b.running() else ""
            lines.append(f"broker {b.broker_id}   {b.state()}  {b.address}{metrics}  log {b.log_path}")
        controller = self._controller()
        lines.append(f"controller: broker {controller}" if controller >= 0 else "controller: none known")
        return "\n".join(lines)

    def _controller(self) -> int:
        for b in self.brokers:
            if b.running():
                try:
                    with KafkaClient(b.address, timeout=5) as c:
                        return describe_cluster(c, []).controller_id
                except Exception:  # noqa: BLE001 - ask the next one
                    continue
        return -1

    def handle(self, command: str, broker_id: int | None) -> tuple[bool, str]:
        """A control command (on a control-channel thread): (ok, what happened)."""
        if command == "status":
            if broker_id is not None and not any(b.broker_id == broker_id for b in self.brokers):
                return False, self._no_such(broker_id)
            return True, self.status(broker_id)
        if broker_id is None:
            return False, f"{command} needs --broker N (1..{len(self.brokers)})"
        b = next((b for b in self.brokers if b.broker_id == broker_id), None)
        if b is None:
            return False, self._no_such(broker_id)
        with b.lock:
            if self.stopping.is_set():
                return False, "the cluster is stopping"
            if command == "stop":
                rc = b.stop()
                return True, (f"broker {broker_id} was not running" if rc is None
                              else f"broker {broker_id} stopped (controlled shutdown, exit code {rc})")
            if command == "kill":
                pid = b.pid
                rc = b.kill()
                return True, (f"broker {broker_id} was not running" if rc is None
                              else f"broker {broker_id} killed (SIGKILL to pid {pid})")
            if command == "start" and b.running():
                return True, f"broker {broker_id} is already running (pid {b.pid})"
            if command == "restart":
                b.stop()
            return self._start_one(b)

    def _no_such(self, broker_id: int) -> str:
        return f"no broker {broker_id} in this cluster (brokers 1..{len(self.brokers)})"

    def _start_one(self, b: DevBroker) -> tuple[bool, str]:
        waited = time.monotonic()
        why = self._wait_registrations_gone([b])
        if why is not None:
            return False, why
        waited = time.monotonic() - waited
        try:
            self._on_main_thread(b.start)
        except (OSError, RuntimeError) as exc:
            return False, f"broker {b.broker_id} did not start: {exc}"
        why = b.wait_registered(READY_TIMEOUT_S, self.stopping)
        if why is not None:
            return False, why
        note = f", after {waited:.0f} s waiting for its old ZooKeeper session to expire" if waited >= 1 else ""
        return True, f"broker {b.broker_id} started (pid {b.pid}) and registered{note}"

    def _wait_registrations_gone(self, brokers: list[DevBroker]) -> str | None:
        """A broker killed a moment ago still has its ephemeral /brokers/ids/N until its ZooKeeper session
        expires (so has every broker of a cluster whose dev-cluster was killed outright: ZooKeeper
        restores the sessions and lets them expire); a new process started before then finds its id
        taken. Wait for that here; None once they are gone, else why not."""
        ids = {b.broker_id for b in brokers}
        timeout_s = max(int(b.props.get("zookeeper.session.timeout.ms", "18000")) for b in brokers) / 1000 + 10
        deadline = time.monotonic() + timeout_s
        try:
            with ZkClient(self.zookeeper.connect) as zk:
                while taken := sorted(ids & set(zk.get_all_broker_ids())):
                    if self.stopping.is_set():
                        return "the cluster is stopping"
                    if time.monotonic() >= deadline:
                        return (f"the old registrations of broker(s) {', '.join(map(str, taken))} in "
                                f"/brokers/ids did not expire within {timeout_s:.0f} s")
                    time.sleep(0.2)
        except Exception as exc:  # noqa: BLE001 - whatever kazoo raises, in one line
            return f"cannot read /brokers/ids from ZooKeeper at {self.zookeeper.connect}: {exc}"
        return None

    def _on_main_thread(self, fn: Callable[[], None]) -> None:
        done: Future[None] = Future()
        self._jobs.put((fn, done))
        while not done.done():
            if self.stopping.is_set():
                raise RuntimeError("the cluster is stopping")
            try:
                done.result(timeout=0.5)
            except TimeoutError:
                continue

    def watch(self) -> None:
        """Until asked to stop: run the control channel's process starts, and say once when a broker
        exits on its own (the others keep running)."""
        while not self.stopping.is_set():
            try:
                fn, done = self._jobs.get(timeout=0.5)
            except queue.Empty:
                pass
            else:
                try:
                    fn()
                    done.set_result(None)
                except Exception as exc:  # noqa: BLE001 - handed to the waiting command
                    done.set_exception(exc)
            for b in self.brokers:
                rc = b.exited()
                if rc is not None and not b.reported_exit and not b.exit_expected:
                    b.reported_exit = True
                    print(f"broker {b.broker_id} exited with code {rc} (log: {b.log_path})", flush=True)
            self._report_server_exits()

    def _report_server_exits(self) -> None:
        servers = [("zookeeper", self.zookeeper.proc, self.zookeeper.log_path)]
        if self.s3 is not None:
            servers.append((self.s3.name, self.s3.proc, self.s3.log_path))
        for name, proc, log_path in servers:
            if proc is not None and proc.poll() is not None and name not in self._reported:
                self._reported.add(name)
                print(f"{name} exited with code {proc.returncode} (log: {log_path}); the brokers cannot work "
                      "without it: stop the cluster and start it again", flush=True)

    def stop(self) -> None:
        """SIGTERM to every broker (each shuts down in order on its own), wait, SIGKILL what is left;
        then the S3 server, and ZooKeeper last, so the brokers can still close their sessions."""
        self.stopping.set()
        if self.control is not None:
            self.control.close()
        held = [b for b in self.brokers if b.lock.acquire(timeout=STOP_TIMEOUT_S + 10)]
        try:
            running = [b for b in self.brokers if b.running()]
            for b in running:
                b.signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for b in running:
                b.wait(deadline - time.monotonic())
        finally:
            for b in held:
                b.lock.release()
        if self.s3 is not None:
            self.s3.stop()
        self.zookeeper.stop()


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tieredlog dev-cluster",
        description="Run a ZooKeeper, a shared remote tier and N brokers on 127.0.0.1 until Ctrl-C or SIGTERM. "
                    "On a running cluster: tieredlog dev-cluster {stop,kill,start,restart} --broker N [--dir DIR], "
                    "tieredlog dev-cluster status [--dir DIR].")
    p.add_argument("--brokers", type=int, default=3, help="how many brokers (ids 1..N), default 3")
    p.add_argument("--dir", default="./cluster", help="where the data and logs go, default ./cluster")
    p.add_argument("--base-port", type=int, default=9092, help="broker i listens on base-port + i - 1")
    p.add_argument("--zookeeper-port", type=int, default=2181)
    p.add_argument("--metrics-port", type=int, default=9404,
                   help="broker i serves Prometheus metrics and its console on metrics-port + i - 1; -1 turns "
                        "them off")
    p.add_argument("--remote", choices=("folder", "s3"), default="folder",
                   help="the remote tier every broker shares: the folder DIR/remote-storage (default) or a "
                        "bucket of a local S3 server")
    p.add_argument("--s3-server", choices=("auto", "seaweedfs", "moto"), default="auto",
                   help="with --remote s3: SeaweedFS (keeps the objects in DIR/s3) or moto (in memory); "
                        "auto takes SeaweedFS when installed")
    p.add_argument("--s3-port", type=int, default=8333, help="with --remote s3: the S3 endpoint's port")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="a broker config for every broker")
    return p


_CONTROL_HELP = {
    "status": "every process of the dev-cluster running on DIR (or one broker's), and the controller",
    "start": "start broker N of the dev-cluster running on DIR; returns once it is registered",
    "stop": "SIGTERM broker N of the dev-cluster running on DIR (its controlled shutdown) and wait for its exit",
    "kill": "SIGKILL broker N of the dev-cluster running on DIR, as kill -9",
    "restart": "stop, then start broker N of the dev-cluster running on DIR",
}


def _control_parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"tieredlog dev-cluster {command}", description=_CONTROL_HELP[command])
    p.add_argument("--broker", type=int, required=command != "status", help="the broker's id")
    p.add_argument("--dir", default="./cluster", help="the running cluster's --dir, default ./cluster")
    return p


def _split_command(argv: list[str]) -> tuple[str | None, list[str]]:
    """The control command wherever it stands among the options (every option takes a value)."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in COMMANDS:
            return token, argv[:i] + argv[i + 1:]
        if token.startswith("--") and "=" not in token and token != "--help":
            i += 1  # its value
        i += 1
    return None, argv


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line parsed as main() parses it, running nothing (a control command or a cluster run)."""
    command, rest = _split_command(argv)
    return _control_parser(command).parse_args(rest) if command is not None else _run_parser().parse_args(rest)


def _tool_name() -> str:
    """How the user ran us, for the commands we print: `.venv/bin/tieredlog` or `python -m ...`."""
    argv0 = sys.argv[0] if sys.argv else ""
    return argv0 if Path(argv0).name == "tieredlog" else f"{sys.executable} -m tieredlog.cli"


def _control(command: str, argv: list[str]) -> int:
    a = _control_parser(command).parse_args(argv)
    try:
        ok, message = send(Path(a.dir).resolve(), command, a.broker)
    except ControlError as exc:
        print(f"tieredlog dev-cluster {command}: {exc}", file=sys.stderr)
        return 1
    print(message, file=sys.stdout if ok else sys.stderr, flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    command, rest = _split_command(sys.argv[1:] if argv is None else argv)
    if command is not None:
        return _control(command, rest)
    a = _run_parser().parse_args(rest)
    if a.brokers < 1:
        print("tieredlog dev-cluster: --brokers must be at least 1", file=sys.stderr)
        return 2
    base = Path(a.dir).resolve()
    try:
        overrides = _parse_overrides(a.override)
        s3 = LocalS3Server(available_kind(a.s3_server), base / "s3", a.s3_port) if a.remote == "s3" else None
        _check_settings(base, a.remote)
    except (DevClusterError, S3ServerNotAvailable) as exc:
        print(f"tieredlog dev-cluster: {exc}", file=sys.stderr)
        return 2
    cluster = DevCluster(base, a.brokers, a.base_port, a.zookeeper_port, a.metrics_port, s3, overrides)

    def on_signal(_signum: int, _frame: Any) -> None:
        cluster.stopping.set()

    # installed before anything starts: a signal during start-up still stops what was started
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rc = 0
    try:
        cluster.start()
        print(cluster.describe(_tool_name()), flush=True)
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
