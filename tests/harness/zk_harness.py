"""A real standalone ZooKeeper server (Debian's `zookeeper` package) for integration tests. The server
itself is tieredlog.tools.zookeeper_server (the one `tieredlog dev-cluster` runs); this module adds the
pytest fixtures and the test helpers.

    zk = ZooKeeperServer(tmp_path / "zk").start()
    zk.connect             # "127.0.0.1:<free port>"
    zk.restart()           # stop, start again on the same port with the same data
    zk.restart(wipe=True)  # ... with an empty data dir: every session and znode is gone
    zk.stop()              # SIGTERM, then SIGKILL; idempotent
    zk.log_text()          # the server's log (attach it to assertion messages)

Fixtures (import them into a test module): ``zookeeper`` (one server per module), ``zk_connect`` (that
server with a chroot per test) and ``zookeeper_factory`` (servers for one test). Helpers:
``expire_session`` (what a long GC pause or partition does to a session), ``wait_until``. Every server binds 127.0.0.1 on a free port, runs with a
128 MiB heap, and is stopped when its fixture ends, also when the test fails; an atexit hook kills any
server a crashed run left behind. A missing jar or JVM fails the test with one line saying what to
install: ZooKeeper is a test dependency (`make system-deps`), never a reason to skip.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tieredlog.tools.zookeeper_server import (  # noqa: F401 - re-exported for the test modules
    ZooKeeperNotAvailable,
    ZooKeeperServer,
    four_letter_word,
    free_port,
    zookeeper_classpath,
)


def expire_session(connect: str, client_id: tuple[int, bytes]) -> None:
    """Expire a live session the way ZooKeeper's own tests do: attach a second client to it, then
    close that one. The server deletes the session's ephemeral znodes at once; the first client learns
    of the expiry when it reconnects."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=connect, client_id=client_id, timeout=10.0)
    other.start(timeout=10)
    other.stop()
    other.close()


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message}")


def _start_or_fail(server: ZooKeeperServer) -> ZooKeeperServer:
    try:
        return server.start()
    except ZooKeeperNotAvailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper per test module; give each test its own chroot to keep tests apart."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield _start_or_fail(server)
    finally:
        server.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """``zookeeper.connect`` for this test: the module's server with a chroot of the test's own, so
    tests sharing the server never see each other's znodes."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)
    return f"{zookeeper.connect}/tests/{name}"


@pytest.fixture
def zookeeper_factory(tmp_path: Path) -> Iterator[Callable[[], ZooKeeperServer]]:
    """``zookeeper_factory()`` starts a server owned by this test (restart it, wipe it, kill it)."""
    started: list[ZooKeeperServer] = []

    def make() -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path / f"zk{len(started)}")
        started.append(server)
        return _start_or_fail(server)

    try:
        yield make
    finally:
        for server in started:
            server.stop()
