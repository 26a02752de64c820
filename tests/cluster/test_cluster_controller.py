"""Controller election on a real ZooKeeper: one winner among racing brokers, the epoch raised on every
change of controller, failover when the controller's session closes or expires."""

from __future__ import annotations

import json
import threading
from typing import Iterator

import pytest
from zk_harness import ZooKeeperServer, expire_session, wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster import znodes
from tieredlog.cluster.controller_election import ControllerElector
from tieredlog.cluster.zk import ZkClient

pytestmark = pytest.mark.integration


class Broker:
    """One broker's ZooKeeper session and elector, with the callbacks it received."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.broker_id = broker_id
        self.zk = ZkClient(connect, session_timeout_ms=4000, name=f"b{broker_id}")
        self.became: list[int] = []
        self.resigned = 0
        self.callback_threads: set[str] = set()
        self.elector = ControllerElector(self.zk, broker_id, on_become_controller=self._become, on_resign=self._resign)

    def _become(self, epoch: int) -> None:
        self.callback_threads.add(threading.current_thread().name)
        self.became.append(epoch)

    def _resign(self) -> None:
        self.resigned += 1

    def close(self) -> None:
        self.elector.close()
        self.zk.close()


@pytest.fixture
def brokers(zk_connect: str) -> Iterator[list[Broker]]:  # noqa: F811
    made = [Broker(zk_connect, i) for i in (1, 2, 3)]
    try:
        for b in made:
            b.zk.start()
        yield made
    finally:
        for b in made:
            b.close()


def agreed_controller(brokers: list[Broker]) -> int | None:
    """The controller every broker in ``brokers`` sees, if they agree and exactly that one holds office."""
    ids = {b.elector.controller_id for b in brokers}
    if len(ids) != 1 or None in ids:
        return None
    (cid,) = ids
    holders = [b.broker_id for b in brokers if b.elector.is_controller]
    return cid if holders == [cid] else None


def controller_znode(zk: ZkClient) -> dict[str, object]:
    got = zk.get_data(znodes.CONTROLLER_PATH)
    assert got is not None
    return json.loads(got[0])  # type: ignore[no-any-return]


def test_three_brokers_elect_exactly_one_and_fail_over(brokers: list[Broker]) -> None:
    start = threading.Barrier(len(brokers))

    def join(b: Broker) -> None:
        start.wait()
        b.elector.start()

    threads = [threading.Thread(target=join, args=(b,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_until(lambda: agreed_controller(brokers) is not None, message="all three to agree on one controller")

    first = next(b for b in brokers if b.elector.is_controller)
    js = controller_znode(brokers[0].zk)
    assert js["version"] == 1 and js["brokerid"] == first.broker_id and str(js["timestamp"]).isdigit()
    assert brokers[0].zk.get_data(znodes.CONTROLLER_EPOCH_PATH)[0] == b"1"  # type: ignore[index]
    assert all(b.elector.controller_epoch == 1 for b in brokers)
    assert first.became == [1] and all(b.became == [] for b in brokers if b is not first)
    assert first.elector.controller_epoch_zk_version == 0
    assert first.callback_threads == {f"controller-election-{first.broker_id}_0"}, "callbacks run on the election thread"

    # the controller's session closes (a crash): a survivor takes over with a higher epoch
    first.zk.close()
    survivors = [b for b in brokers if b is not first]
    wait_until(lambda: agreed_controller(survivors) is not None, message="a new controller among the survivors")
    second = next(b for b in survivors if b.elector.is_controller)
    assert all(b.elector.controller_epoch == 2 for b in survivors)
    assert second.became == [2] and controller_znode(second.zk)["brokerid"] == second.broker_id
    assert second.elector.fence.latest == 2

    # and once more: the last broker standing becomes controller with epoch 3
    second.zk.close()
    (last,) = [b for b in survivors if b is not second]
    wait_until(lambda: last.elector.is_controller, message="the last broker to take over")
    assert last.elector.controller_epoch == 3 and last.became == [3]
    assert last.zk.get_data(znodes.CONTROLLER_EPOCH_PATH)[0] == b"3"  # type: ignore[index]


def test_expired_controller_resigns_and_a_higher_epoch_takes_over(zookeeper: ZooKeeperServer,  # noqa: F811
                                                                  brokers: list[Broker]) -> None:
    for b in brokers:
        b.elector.start()
    wait_until(lambda: agreed_controller(brokers) is not None, message="a controller")
    old = next(b for b in brokers if b.elector.is_controller)
    old_session = old.zk.session_id
    assert old.zk.kazoo.client_id is not None

    # a long GC pause or a partition: ZooKeeper expires the controller's session
    expire_session(zookeeper.connect, old.zk.kazoo.client_id)
    wait_until(lambda: old.resigned == 1, message="the expired controller to resign")
    wait_until(lambda: agreed_controller(brokers) is not None and old.zk.session_id != old_session,
               message="everyone, the expired broker on its new session too, to agree on a controller")
    assert all(b.elector.controller_epoch == 2 for b in brokers), "a new election raised the epoch"
    new = next(b for b in brokers if b.elector.is_controller)
    assert new.became[-1] == 2
    js = controller_znode(new.zk)
    assert js["brokerid"] == new.broker_id
    assert new.zk.exists(znodes.CONTROLLER_PATH).ephemeralOwner == new.zk.session_id  # type: ignore[union-attr]


def test_closing_the_controller_hands_over_at_once(brokers: list[Broker]) -> None:
    for b in brokers:
        b.elector.start()
    wait_until(lambda: agreed_controller(brokers) is not None, message="a controller")
    old = next(b for b in brokers if b.elector.is_controller)
    old.elector.close()  # a clean shutdown: resigns and deletes /controller, the session stays open
    assert old.resigned == 1 and not old.elector.is_controller
    others = [b for b in brokers if b is not old]
    wait_until(lambda: agreed_controller(others) is not None, timeout=5, message="a successor")
    assert all(b.elector.controller_epoch == 2 for b in others)
    assert old.zk.exists(znodes.CONTROLLER_PATH).ephemeralOwner != old.zk.session_id  # type: ignore[union-attr]
