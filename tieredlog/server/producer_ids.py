"""Producer ids that are never handed out twice: by a broker across its restarts, and by the brokers of
one cluster among themselves.

Both managers reserve a block of ids before using any id of it. Alone, the block is recorded in a file
of the first log dir; in a cluster it is claimed in ZooKeeper's /latest_producer_id_block, as Kafka's
ZooKeeper-mode brokers do. Claiming a block is disk or ZooKeeper I/O: it runs in a thread, once per
block, and callers on the event loop await it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from tieredlog.atomic_file import atomic_write

PRODUCER_ID_BLOCK = 1000
PRODUCER_ID_FILE = "tieredlog-producer-id-block"


class ProducerIdBlocks(Protocol):
    def claim_block(self, block_size: int) -> tuple[int, int]:
        """Reserve ``block_size`` ids durably: (first, last inclusive). Blocking I/O."""


class _BlockAllocator:
    def __init__(self, blocks: ProducerIdBlocks) -> None:
        self._blocks = blocks
        self._next = 0
        self._last = -1
        self._lock = asyncio.Lock()

    async def next_producer_id(self) -> int:
        async with self._lock:
            if self._next > self._last:
                self._next, self._last = await asyncio.to_thread(self._blocks.claim_block, PRODUCER_ID_BLOCK)
            pid = self._next
            self._next += 1
            return pid


class FileProducerIdBlocks:
    """A broker alone: the end of the last reserved block, in a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def claim_block(self, block_size: int) -> tuple[int, int]:
        try:
            start = int(self.path.read_text().strip())
        except (FileNotFoundError, ValueError):
            start = 0
        atomic_write(self.path, f"{start + block_size}\n".encode())
        return start, start + block_size - 1


class ZkProducerIdBlocks:
    """A cluster member: blocks claimed in ZooKeeper, shared by every broker of the cluster."""

    def __init__(self, zk, broker_id: int) -> None:  # noqa: ANN001 - tieredlog.cluster.zk.ZkClient
        self._zk = zk
        self._broker_id = broker_id

    def claim_block(self, block_size: int) -> tuple[int, int]:
        return self._zk.allocate_producer_id_block(self._broker_id, block_size)


class ProducerIdManager(_BlockAllocator):
    @classmethod
    def in_log_dir(cls, log_dir: Path) -> "ProducerIdManager":
        return cls(FileProducerIdBlocks(log_dir / PRODUCER_ID_FILE))

    @classmethod
    def in_zookeeper(cls, zk, broker_id: int) -> "ProducerIdManager":  # noqa: ANN001
        return cls(ZkProducerIdBlocks(zk, broker_id))
