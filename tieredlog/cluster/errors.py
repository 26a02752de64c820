"""Errors of the cluster layer. Each message is one line an operator can act on; the start-up ones
carry Kafka's own wording so a search for the Kafka message finds the same answer."""

from __future__ import annotations


class ClusterError(Exception):
    """Base of every error raised by ``tieredlog.cluster``."""


class InvalidZkConnectError(ClusterError, ValueError):
    """``zookeeper.connect`` does not parse as ``host:port[,host:port...][/chroot]``."""


class ZkConnectionTimeoutError(ClusterError):
    """No ZooKeeper session within ``zookeeper.connection.timeout.ms`` (Kafka's
    ZooKeeperClientTimeoutException)."""


class InconsistentClusterIdError(ClusterError):
    """``meta.properties`` belongs to another cluster (Kafka's InconsistentClusterIdException)."""


class InconsistentBrokerIdError(ClusterError):
    """``meta.properties`` was written by another broker id (Kafka's InconsistentBrokerIdException)."""


class ControllerMovedError(ClusterError):
    """The controller epoch's znode version changed under a controller write, or the election was lost
    while it was being checked (Kafka's ControllerMovedException)."""


class ZkVersionConflictError(ClusterError):
    """A conditional update found another znode version than the one it read (ZooKeeper's BADVERSION):
    someone else wrote in between; read again and decide again."""

    def __init__(self, path: str, expected_version: int) -> None:
        super().__init__(f"Conditional update of {path} failed: its version is no longer {expected_version}")
        self.path = path
        self.expected_version = expected_version


class MalformedZnodeError(ClusterError, ValueError):
    """A znode's data is not the JSON Kafka writes there."""


class EphemeralOwnedByAnotherSession(ClusterError):
    """An ephemeral znode we create already exists and belongs to another session (``owner``), live or
    not yet expired."""

    def __init__(self, message: str, path: str = "", owner: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.owner = owner


class BrokerIdInUseError(EphemeralOwnedByAnotherSession):
    """``/brokers/ids/<id>`` is held by another live session: two brokers configured with one id."""


class ReassignmentInProgressError(ClusterError):
    """``/admin/reassign_partitions`` exists: a reassignment is still running."""
