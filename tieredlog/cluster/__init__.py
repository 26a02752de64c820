"""Cluster coordination through ZooKeeper, in Kafka's ZooKeeper-mode layout (see docs/cluster.md).

- ``znodes``: the paths and the JSON Kafka stores at them (pure codecs).
- ``zk``: ``ZkClient``, a typed blocking client over kazoo; conditional (versioned) writes.
- ``meta_properties``: which cluster and broker a log dir belongs to.
- ``registration``: the cluster id and the ephemeral /brokers/ids/<id>.
- ``controller_election``: the race for /controller, the controller epoch, and its fencing.
- ``membership``: ``ZkClusterMembership``, the one object a broker holds (start / close).

Everything here blocks on ZooKeeper: call it from threads, or through the ``*_async`` wrappers,
never on the asyncio event loop. With no ``zookeeper.connect`` none of it runs.
"""
