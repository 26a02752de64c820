"""``meta.properties``: the cluster and the broker a log dir belongs to (Kafka's BrokerMetadataCheckpoint).

A broker in ZooKeeper mode writes Kafka's version 0 layout (``version=0``, ``broker.id``,
``cluster.id``). It reads version 1 too (``node.id``), which a standalone tieredlog broker writes, so a
broker that ran alone can join a cluster with its data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tieredlog.atomic_file import atomic_write
from tieredlog.cluster.errors import InconsistentBrokerIdError, InconsistentClusterIdError
from tieredlog.config import read_properties

META_PROPERTIES = "meta.properties"


@dataclass(frozen=True)
class MetaProperties:
    path: Path
    version: int
    cluster_id: str | None
    broker_id: int | None


def read_meta_properties(log_dir: str | Path) -> MetaProperties | None:
    """The log dir's meta.properties, or None when it has none yet."""
    path = Path(log_dir) / META_PROPERTIES
    try:
        props = read_properties(path)
    except FileNotFoundError:
        return None
    broker = props.get("broker.id") or props.get("node.id")
    try:
        version = int(props.get("version", "0"))
        broker_id = int(broker) if broker else None
    except ValueError:
        raise InconsistentBrokerIdError(f"Malformed {path}: version and broker.id must be integers") from None
    return MetaProperties(path, version, props.get("cluster.id") or None, broker_id)


def write_meta_properties(log_dir: str | Path, broker_id: int, cluster_id: str) -> None:
    """Kafka's ZooKeeper-mode meta.properties, replaced atomically."""
    text = f"#\n#Written by tieredlog\nversion=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n"
    atomic_write(Path(log_dir) / META_PROPERTIES, text.encode())


def stored_cluster_id(log_dirs: list[Path]) -> str | None:
    """The cluster id a log dir already holds (the first one found)."""
    for d in log_dirs:
        meta = read_meta_properties(d)
        if meta is not None and meta.cluster_id:
            return meta.cluster_id
    return None


def check_meta_properties(log_dirs: list[Path], cluster_id: str, broker_id: int) -> None:
    """Refuse to start when a log dir belongs to another cluster or another broker (Kafka's checks and
    messages, ``Some(...)`` included, so the Kafka answers to them apply here too)."""
    for d in log_dirs:
        meta = read_meta_properties(d)
        if meta is None:
            continue
        if meta.cluster_id is not None and meta.cluster_id != cluster_id:
            raise InconsistentClusterIdError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId Some({meta.cluster_id}) in meta.properties. "
                "The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong.")
        if meta.broker_id is not None and meta.broker_id != broker_id:
            raise InconsistentBrokerIdError(
                f"Configured broker.id {broker_id} doesn't match stored broker.id Some({meta.broker_id}) in "
                "meta.properties. If you moved your data, make sure your configured broker.id matches. If you intend "
                "to create a new broker, you should remove all data in your data directories (log.dirs).")
