"""Run a standalone Apache ZooKeeper server from Debian's `zookeeper` package (`/usr/share/java`).

`tieredlog dev-cluster` and the integration tests start ZooKeeper with this one implementation:

    zk = ZooKeeperServer(base_dir, port=2181).start()
    zk.connect             # "127.0.0.1:2181"
    zk.restart()           # stop, start again on the same port with the same data
    zk.restart(wipe=True)  # ... with an empty data dir: every session and znode is gone
    zk.stop()              # SIGTERM, then SIGKILL; idempotent
    zk.log_text()          # the server's log

The server binds 127.0.0.1 only, runs with a 128 MiB heap and no fsync (a development server, never a
production ensemble), writes its config, data and log under ``base_dir``, and dies with the process
that started it (PR_SET_PDEATHSIG, and an atexit hook for an orderly exit that forgot it). A missing
jar or JVM is ZooKeeperNotAvailable with one line saying what to install.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
import zipfile
from pathlib import Path

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
# zookeeper.jar's manifest Class-Path already names its dependencies in /usr/share/java (jute,
# slf4j-api, netty, jackson, metrics, snappy, ...). Only an slf4j binding is added, so the server's log
# reaches its file instead of slf4j's "no binding" warning.
SLF4J_BINDING_JAR = JAVA_DIR / "slf4j-simple.jar"
# What QuorumPeerMain cannot start without (the rest of the manifest is optional at runtime).
REQUIRED_DEPENDENCIES = ("zookeeper-jute.jar", "slf4j-api.jar", "commons-io.jar", "metrics-core.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
JVM_OPTS = (
    "-Xmx128m",
    "-Xms16m",
    "-Xss512k",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # the C1 compiler alone starts the JVM faster on 2 cores
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
)
START_TIMEOUT_S = 30.0
INSTALL_HINT = "install it with `make system-deps` or `apt-get install zookeeper`"

_RUNNING: set[subprocess.Popen[bytes]] = set()


class ZooKeeperNotAvailable(RuntimeError):
    """ZooKeeper or Java is not installed; the message says what is missing."""


def die_with_parent() -> None:
    """A ``preexec_fn``: the child gets SIGKILL when the process that started it dies."""
    # A parent killed outright (SIGKILL, a CI timeout) runs no teardown and no atexit hook: the kernel
    # then kills the child for us (Linux's PR_SET_PDEATHSIG).
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zookeeper_classpath(jar: Path = ZOOKEEPER_JAR) -> str:
    """The server's classpath, or ZooKeeperNotAvailable naming what is missing."""
    if not jar.is_file():
        raise ZooKeeperNotAvailable(f"ZooKeeper is not installed: {jar} is missing; {INSTALL_HINT}")
    missing = [name for name in REQUIRED_DEPENDENCIES if not (jar.parent / name).exists()]
    if missing:
        raise ZooKeeperNotAvailable(
            f"ZooKeeper's dependencies are missing from {jar.parent}: {', '.join(missing)}; {INSTALL_HINT}")
    with zipfile.ZipFile(jar) as z:
        if not any(n.startswith(MAIN_CLASS.replace(".", "/")) for n in z.namelist()):
            raise ZooKeeperNotAvailable(f"{jar} has no {MAIN_CLASS}; {INSTALL_HINT}")
    parts = [str(jar)]
    if SLF4J_BINDING_JAR.exists():
        parts.append(str(SLF4J_BINDING_JAR))
    return os.pathsep.join(parts)


def java_executable() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotAvailable("ZooKeeper needs a JVM and `java` is not on PATH; install default-jre-headless")
    return java


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    def __init__(self, base_dir: str | os.PathLike, port: int | None = None, *, tick_ms: int = 500) -> None:
        self.base_dir = Path(base_dir)
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.base_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            # sessions as short as 2 ticks and as long as Kafka's 18 s default are granted as asked
            f"minSessionTimeout={2 * self.tick_ms}\n"
            "maxSessionTimeout=60000\n"
            "4lw.commands.whitelist=srvr,ruok\n"
            # a test server: no fsync per write, no 64 MiB log preallocation
            "forceSync=no\n"
            "preAllocSize=1024\n"
            "maxClientCnxns=0\n"
        )
        return cfg

    def start(self, timeout: float = START_TIMEOUT_S) -> "ZooKeeperServer":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"ZooKeeper on {self.connect} is already running")
        classpath = zookeeper_classpath()
        java = java_executable()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        cfg = self._write_config()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [java, *JVM_OPTS, "-cp", classpath, MAIN_CLASS, str(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches our parent, which stops us in order
            preexec_fn=die_with_parent,
        )
        log.close()
        _RUNNING.add(self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._forget()
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode} during start-up:\n{self.log_tail()}")
            # `srvr` answers "not currently serving requests" until the database is loaded
            if "Mode: standalone" in four_letter_word(self.host, self.port, "srvr"):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer on {self.connect} within {timeout:.0f} s:\n{self.log_tail()}")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
            except ProcessLookupError:
                pass
        self._forget()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._forget()

    def restart(self, *, wipe: bool = False) -> "ZooKeeperServer":
        self.stop()
        if wipe:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return self.start()

    def _forget(self) -> None:
        if self.proc is not None:
            _RUNNING.discard(self.proc)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])



@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_RUNNING):
        if proc.poll() is None:
            proc.kill()
