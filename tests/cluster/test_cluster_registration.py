"""Broker registration and the cluster id on a real ZooKeeper, through ZkClusterMembership (what the
broker will hold): Kafka's JSON at /brokers/ids/<id>, one live broker per id, /cluster/id created once
and kept in meta.properties, a wrong cluster refused, and the registration back after a session expiry
or a ZooKeeper restart."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from zk_harness import (  # noqa: F401
    ZooKeeperServer,
    expire_session,
    free_port,
    wait_until,
    zk_connect,
    zookeeper,
    zookeeper_factory,
)

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import BrokerIdInUseError, InconsistentBrokerIdError, InconsistentClusterIdError
from tieredlog.cluster.membership import ZkClusterConfig, ZkClusterMembership
from tieredlog.cluster.meta_properties import read_meta_properties
from tieredlog.cluster.znodes import EndPoint

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(zk_connect: str, tmp_path: Path) -> Iterator[Callable[..., ZkClusterMembership]]:  # noqa: F811
    """``cluster(broker_id, **config)`` builds a (not yet started) member with its own log dir; every
    member is closed when the test ends."""
    made: list[ZkClusterMembership] = []

    def member(broker_id: int, *, log_dir: Path | None = None, connect: str | None = None,
               session_timeout_ms: int = 4000, **kw: object) -> ZkClusterMembership:
        kw.setdefault("endpoints", (EndPoint("PLAINTEXT", "127.0.0.1", 19090 + broker_id),))
        cfg = ZkClusterConfig(connect=connect or zk_connect, broker_id=broker_id,
                              log_dirs=(log_dir or tmp_path / f"broker{broker_id}-{len(made)}",),
                              session_timeout_ms=session_timeout_ms, **kw)  # type: ignore[arg-type]
        m = ZkClusterMembership(cfg)
        made.append(m)
        return m

    try:
        yield member
    finally:
        for m in made:
            m.close()


def registration(m: ZkClusterMembership) -> tuple[dict[str, object], int]:
    got = m.zk.get_data(znodes.broker_id_path(m.broker_id))
    assert got is not None, f"/brokers/ids/{m.broker_id} is missing"
    return json.loads(got[0]), got[1].ephemeralOwner


def test_registration_is_visible_with_kafkas_json(cluster: Callable[..., ZkClusterMembership]) -> None:
    m = cluster(1, rack="rack-a", endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 19091),
                                             EndPoint("SSL", "broker1.example", 19191, "SSL")))
    before = int(time.time() * 1000)
    m.start()
    js, owner = registration(m)
    ts = js.pop("timestamp")
    assert js == {"listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"},
                  "endpoints": ["PLAINTEXT://127.0.0.1:19091", "SSL://broker1.example:19191"], "rack": "rack-a",
                  "jmx_port": -1, "host": "127.0.0.1", "port": 19091, "version": 4}
    assert isinstance(ts, str) and before - 1000 <= int(ts) <= int(time.time() * 1000) + 1000
    stat = m.zk.exists("/brokers/ids/1")
    assert stat is not None and owner == m.zk.session_id, "ephemeral: it lives and dies with this broker's session"
    assert m.broker_epoch == stat.czxid, "the broker epoch is the registration's czxid, as in Kafka"
    assert m.zk.get_all_broker_ids() == [1]

    plain = cluster(2)
    plain.start()
    js2, _ = registration(plain)
    assert "rack" not in js2 and js2["endpoints"] == ["PLAINTEXT://127.0.0.1:19092"]
    assert m.zk.get_all_broker_ids() == [1, 2]

    m.close()
    assert plain.zk.get_all_broker_ids() == [2], "closing the session deletes the registration at once"


def test_second_broker_with_the_same_id_is_refused(cluster: Callable[..., ZkClusterMembership]) -> None:
    first = cluster(5)
    first.start()
    _, owner = registration(first)
    twin = cluster(5, session_timeout_ms=2000)  # it waits 1.5 session timeouts for the id to be freed
    with pytest.raises(BrokerIdInUseError) as err:
        twin.start()
    message = str(err.value)
    assert "\n" not in message
    assert message == (f"Error while creating ephemeral at /brokers/ids/5, node already exists and owner '0x{owner:x}' "
                       f"does not match current session '0x{twin.zk.session_id:x}'")
    assert twin.zk.closed, "a refused broker leaves no session behind"
    assert read_meta_properties(twin.config.log_dirs[0]) is None, "nor a meta.properties"
    assert registration(first)[1] == owner, "the live broker keeps its registration"
    # once the first one is gone the id is free again
    first.close()
    again = cluster(5)
    again.start()
    assert registration(again)[1] == again.zk.session_id


def test_cluster_id_is_created_once_and_kept_in_meta_properties(cluster: Callable[..., ZkClusterMembership],
                                                                 tmp_path: Path) -> None:
    a = cluster(1, log_dir=tmp_path / "a")
    cluster_id = a.start()
    got = a.zk.get_data(znodes.CLUSTER_ID_PATH)
    assert got is not None
    assert json.loads(got[0]) == {"version": "1", "id": cluster_id} and len(cluster_id) == 22
    created = got[1]

    b = cluster(2, log_dir=tmp_path / "b")
    assert b.start() == cluster_id
    a.close()
    again = cluster(1, log_dir=tmp_path / "a")  # a restarts on its own data
    assert again.start() == cluster_id
    after = again.zk.get_data(znodes.CLUSTER_ID_PATH)
    assert after is not None and (after[1].mzxid, after[1].version) == (created.mzxid, 0), "written once, never again"
    for d, broker in ((tmp_path / "a", 1), (tmp_path / "b", 2)):
        meta = read_meta_properties(d)
        assert meta is not None and (meta.version, meta.broker_id, meta.cluster_id) == (0, broker, cluster_id)


def test_first_broker_of_a_cluster_proposes_its_stored_or_configured_id(cluster: Callable[..., ZkClusterMembership],
                                                                          zookeeper: ZooKeeperServer,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    solo = tmp_path / "solo"
    solo.mkdir()
    (solo / "meta.properties").write_text("version=1\ncluster.id=soloClusterId0000000A\nnode.id=0\n")
    m = cluster(0, log_dir=solo, connect=zookeeper.connect + "/tests/fresh-a")
    assert m.start() == "soloClusterId0000000A", "a standalone broker keeps its cluster id when it founds a cluster"
    configured = cluster(0, connect=zookeeper.connect + "/tests/fresh-b", cluster_id="configuredId0000000000")
    assert configured.start() == "configuredId0000000000"


def test_meta_properties_of_another_cluster_refuses_start(cluster: Callable[..., ZkClusterMembership],
                                                          tmp_path: Path) -> None:
    cluster_id = cluster(1).start()
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "meta.properties").write_text("version=0\nbroker.id=2\ncluster.id=someOtherCluster00000A\n")
    m = cluster(2, log_dir=stray)
    with pytest.raises(InconsistentClusterIdError) as err:
        m.start()
    assert str(err.value) == (
        f"The Cluster ID {cluster_id} doesn't match stored clusterId Some(someOtherCluster00000A) in meta.properties. "
        "The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong.")
    assert m.zk.closed, "a refused broker leaves no session behind"
    checker = cluster(3)
    checker.start()
    assert checker.zk.get_all_broker_ids() == [1, 3], "the refused broker never registered"
    assert "someOtherCluster00000A" in (stray / "meta.properties").read_text(), "its meta.properties is untouched"

    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "meta.properties").write_text(f"version=0\nbroker.id=7\ncluster.id={cluster_id}\n")
    with pytest.raises(InconsistentBrokerIdError, match=r"^Configured broker.id 4 doesn't match stored broker.id Some\(7\)"):
        cluster(4, log_dir=moved).start()


def test_session_expiry_re_registers_and_re_elects(cluster: Callable[..., ZkClusterMembership],
                                                   zookeeper: ZooKeeperServer) -> None:  # noqa: F811
    m = cluster(1)
    m.start()
    assert m.elector.wait_for(lambda s: s.is_controller, 10)
    old_session, old_epoch = m.zk.session_id, m.broker_epoch
    assert m.zk.kazoo.client_id is not None
    expire_session(zookeeper.connect, m.zk.kazoo.client_id)
    wait_until(lambda: m.zk.session_id != old_session and m.broker_epoch is not None, message="a new session")
    _, owner = registration(m)
    assert owner == m.zk.session_id != old_session, "registered again on the new session"
    assert m.broker_epoch is not None and old_epoch is not None and m.broker_epoch > old_epoch
    assert m.elector.wait_for(lambda s: s.is_controller and s.epoch == 2, 10), m.elector.state


def test_zookeeper_restart_under_registered_brokers(zookeeper_factory: Callable[[], ZooKeeperServer],  # noqa: F811
                                                    cluster: Callable[..., ZkClusterMembership]) -> None:
    server = zookeeper_factory()
    # long enough to outlive both ZooKeeper restarts below even on a loaded 2-core machine (each JVM
    # start takes seconds there), so only broker 2's 2 s session expires. The server is listed twice: a
    # client waits for a handshake answer the session timeout divided by the hosts listed (ZooKeeper's
    # Java client as kazoo), and a handshake sent while the restarted server loads its data may never
    # be answered; with one host that wait is the whole session, which the server expires meanwhile.
    steady = cluster(1, connect=f"{server.connect},{server.connect}", session_timeout_ms=45000)
    steady.start()
    assert steady.elector.wait_for(lambda s: s.is_controller, 10)
    brief = cluster(2, connect=server.connect, session_timeout_ms=2000)
    brief.start()
    steady_session, brief_session = steady.zk.session_id, brief.zk.session_id

    # 1. ZooKeeper restarts: it restores the sessions from its data, the brokers reconnect on them
    server.restart()
    # hang guards, not speed bounds: a reconnect attempt that lands while the JVM is still starting
    # waits out kazoo's handshake timeout (the session timeout) before it tries again
    reconnect_s = 60
    wait_until(lambda: steady.zk.connected, timeout=reconnect_s, message="the broker to reconnect")
    assert steady.zk.session_id == steady_session and registration(steady)[1] == steady_session

    # 2. ZooKeeper comes back where the brokers cannot reach it (its client port moved) for longer
    #    than broker 2's session timeout: it expires that session and drops its registration...
    home = server.port
    server.stop()
    server.port = free_port()
    server.start()
    probe = KazooClient(hosts=server.connect)
    probe.start(timeout=10)
    try:
        wait_until(lambda: probe.exists("/brokers/ids/2") is None, timeout=15,
                   message="ZooKeeper to expire the unreachable broker's session")
        assert probe.exists("/brokers/ids/1") is not None, "a 45 s session outlives the outage"
    finally:
        probe.stop()
        probe.close()
    # ...then it is back on its port: broker 2 learns of the expiry and registers on a new session;
    # broker 1 carries on with its session and its office
    server.stop()
    server.port = home
    server.start()
    def registered_on_new_session() -> bool:
        session = brief.zk.session_id
        if session in (None, brief_session):
            return False
        got = brief.zk.get_data(znodes.broker_id_path(2))
        # the broker epoch is the new znode's czxid, noted once the create returns
        return got is not None and got[1].ephemeralOwner == session and brief.broker_epoch == got[1].czxid

    # the new session comes first, the registration on it a moment later
    wait_until(registered_on_new_session, timeout=reconnect_s, message="broker 2 to register on a new session")
    wait_until(lambda: steady.zk.connected, timeout=reconnect_s, message="broker 1 to reconnect")
    assert registration(steady)[1] == steady.zk.session_id == steady_session
    assert brief.elector.wait_for(lambda s: s.controller_id == 1 and s.epoch == 1, 10), brief.elector.state
    assert steady.elector.is_controller and steady.elector.controller_epoch == 1


def test_async_start_keeps_the_loop_running_and_calls_back_on_it(zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    async def main() -> None:
        loop = asyncio.get_running_loop()
        calls: list[tuple[int, bool]] = []
        cfg = ZkClusterConfig(connect=zk_connect, broker_id=1, endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 19091),),
                              log_dirs=(tmp_path / "b1",), session_timeout_ms=4000)
        m = ZkClusterMembership(cfg, loop=loop, on_become_controller=lambda epoch: calls.append(
            (epoch, threading.current_thread() is threading.main_thread())))
        ticks = 0
        running = True

        async def ticker() -> None:
            nonlocal ticks
            while running:
                await asyncio.sleep(0.005)
                ticks += 1

        tick = asyncio.create_task(ticker())
        try:
            await asyncio.sleep(0)
            before = ticks
            assert len(await m.start_async()) == 22
            # the loop kept running while the ZooKeeper session opened and registered (off the loop)
            assert ticks > before
            deadline = time.monotonic() + 10
            while not calls and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert calls == [(1, True)], "the controller callback runs on the event loop's thread"
        finally:
            await m.close_async()
            running = False
            await tick

    asyncio.run(main())


def test_close_never_waits_for_an_unreachable_zookeeper(zookeeper_factory: Callable[[], ZooKeeperServer],  # noqa: F811
                                                        tmp_path: Path) -> None:
    server = zookeeper_factory()
    resigned: list[bool] = []
    cfg = ZkClusterConfig(connect=server.connect, broker_id=1, endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 19091),),
                          log_dirs=(tmp_path / "b1",), session_timeout_ms=4000)
    m = ZkClusterMembership(cfg, on_resign=lambda: resigned.append(True))
    try:
        m.start()
        assert m.elector.wait_for(lambda s: s.is_controller, 10)
        server.stop()
        wait_until(lambda: not m.zk.connected, message="the broker to notice ZooKeeper is gone")
        t0 = time.monotonic()
        m.close()
        assert time.monotonic() - t0 < 5, "shutdown must not hang on ZooKeeper"
        assert resigned == [True], "a controller resigns on shutdown even without ZooKeeper"
    finally:
        m.close()
