"""Cluster coordination through ZooKeeper, in Kafka's ZooKeeper-mode layout (see docs/cluster.md).

- ``znodes``: the paths and the JSON Kafka stores at them (pure codecs).
- ``zk``: ``ZkClient``, a typed blocking client over kazoo; conditional (versioned) writes.
- ``meta_properties``: which cluster and broker a log dir belongs to.
- ``registration``: the cluster id and the ephemeral /brokers/ids/<id>.
- ``controller_election``: the race for /controller, the controller epoch, and its fencing.
- ``live_brokers``: ``LiveBrokers``, every registration under /brokers/ids, cached by a watch.
- ``membership``: ``ZkClusterMembership``, the one object a broker holds (start / close).

Everything here blocks on ZooKeeper: call it from threads, or through the ``*_async`` wrappers,
never on the asyncio event loop. With no ``zookeeper.connect`` none of it runs.
"""

from tieredlog.cluster.controller_election import ControllerElector, ControllerEpochFence, ControllerState
from tieredlog.cluster.errors import (
    BrokerIdInUseError,
    ClusterError,
    ControllerMovedError,
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
    ZkConnectionTimeoutError,
    ZkVersionConflictError,
)
from tieredlog.cluster.live_brokers import LiveBrokers
from tieredlog.cluster.membership import ZkClusterConfig, ZkClusterMembership
from tieredlog.cluster.registration import BrokerRegistration, resolve_cluster_id
from tieredlog.cluster.zk import ZkClient, ZkConnectString
from tieredlog.cluster.znodes import BrokerInfo, EndPoint, LeaderIsrAndControllerEpoch, TopicAssignment

__all__ = [
    "BrokerIdInUseError",
    "BrokerInfo",
    "BrokerRegistration",
    "ClusterError",
    "ControllerElector",
    "ControllerEpochFence",
    "ControllerMovedError",
    "ControllerState",
    "EndPoint",
    "InconsistentBrokerIdError",
    "InconsistentClusterIdError",
    "LeaderIsrAndControllerEpoch",
    "LiveBrokers",
    "TopicAssignment",
    "ZkClient",
    "ZkClusterConfig",
    "ZkClusterMembership",
    "ZkConnectString",
    "ZkConnectionTimeoutError",
    "ZkVersionConflictError",
    "resolve_cluster_id",
]
