"""The remote-tier part of a consumer's fetch: Kafka's DelayedRemoteFetch (KIP-405).

The partitions of one fetch below their local log start are read from the remote tier in parallel,
each bounded by remote.fetch.max.wait.ms. Reads the RLM answers at once (bytes a sequential reader
had read ahead into memory, a throttled fetch, a full reader queue) cost no trip through a pool.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import Protocol

from tieredlog.errors import KafkaError
from tieredlog.log.types import FetchDataInfo, FetchIsolation, TopicPartition
from tieredlog.rate_limited_log import RateLimitedLog
from tieredlog.replication.data_path import PartitionRead, aborted_of, error_code_of

log = logging.getLogger(__name__)
# a remote read failing on something that is not a Kafka error (the RLM reports its own failures)
_remote_bugs = RateLimitedLog(log, 30.0)


class RemoteFetchStats:
    """Kafka's RemoteFetch PurgatorySize (reads a Fetch waits on now) and the DelayedRemoteFetch
    ExpiresPerSec count (reads that outlived remote.fetch.max.wait.ms); written on the event loop,
    read by the metrics scrape."""

    __slots__ = ("waiting", "expires")

    def __init__(self) -> None:
        self.waiting = 0
        self.expires = 0


class RemoteReader(Protocol):
    """What a fetch needs of the RemoteLogManager."""

    def read_async(self, topic_partition: TopicPartition, fetch_offset: int, max_bytes: int,
                   min_one_message: bool = True) -> Future: ...

    def read_committed_async(self, topic_partition: TopicPartition, fetch_offset: int, max_bytes: int,
                             min_one_message: bool = True) -> Future: ...

    def read_failure(self, topic_partition: TopicPartition) -> Exception | None: ...


async def read_remote(reader: RemoteReader, remote: list[PartitionRead], budget: int, nothing_yet: bool,
                      isolation: FetchIsolation, max_wait_s: float, stats: RemoteFetchStats) -> None:
    """Read each of ``remote`` (partitions whose fetch offset is below the local log start) from the
    remote tier into its ``data``, sharing out the ``budget`` bytes the local reads left."""
    waits = []
    for pr, max_bytes, min_one in remote_budgets(remote, budget, nothing_yet):
        if max_bytes <= 0 and not min_one:
            remote_empty(pr, isolation)  # fetch.max.bytes is spent: the client asks again
        elif (fut := _start_remote(reader, pr, max_bytes, min_one, isolation)) is not None:
            waits.append((pr, fut))
    if waits:
        await asyncio.gather(*(_await_remote(reader, pr, fut, isolation, max_wait_s, stats) for pr, fut in waits))


def remote_budgets(remote: list[PartitionRead], budget: int, nothing_yet: bool) -> list[tuple[PartitionRead, int, bool]]:
    """(partition, max bytes, at least one batch) for each remote read of one fetch. The reads run
    in parallel, so the response's ``max_bytes`` left after the local partitions is shared out
    before any of them returns: each takes up to its ``partition_max_bytes`` in request order, and
    only the first may exceed its share by one batch, and only when nothing was read locally
    (Kafka's rule for the first partition of a response)."""
    out = []
    for i, pr in enumerate(remote):
        share = max(min(pr.max_bytes, budget), 0)
        out.append((pr, share, nothing_yet and i == 0))
        budget -= share
    return out


def _start_remote(reader: RemoteReader, pr: PartitionRead, max_bytes: int, min_one: bool,
                  isolation: FetchIsolation) -> Future | None:
    """Start the read of ``pr`` of at most ``max_bytes`` (at least one batch when ``min_one``): the
    RLM's future, or None when the RLM answered at once, already put in ``pr.data``. A
    read_committed fetch also gets the aborted transactions of what it returns."""
    read = reader.read_committed_async if isolation is FetchIsolation.TXN_COMMITTED else reader.read_async
    try:
        fut = read(TopicPartition(pr.topic, pr.partition), pr.fetch_offset, max_bytes, min_one_message=min_one)
    except Exception as exc:  # noqa: BLE001
        remote_failed(pr, exc)
        return None
    if not fut.done():
        return fut
    try:
        _remote_done(pr, fut.result())
    except Exception as exc:  # noqa: BLE001
        remote_failed(pr, exc)
    return None


async def _await_remote(reader: RemoteReader, pr: PartitionRead, fut: Future, isolation: FetchIsolation,
                        max_wait_s: float, stats: RemoteFetchStats) -> None:
    """Wait for the remote read ``fut`` of ``pr``, bounded by remote.fetch.max.wait.ms. On timeout
    the partition comes back empty without an error, so the client simply fetches again, unless the
    partition's remote reads have kept failing for longer than that wait: then it gets their error."""
    stats.waiting += 1
    try:
        result = await asyncio.wait_for(asyncio.wrap_future(fut), max_wait_s)
    except asyncio.TimeoutError:
        stats.expires += 1
        failure = reader.read_failure(TopicPartition(pr.topic, pr.partition))
        if failure is not None:
            remote_failed(pr, failure)
        else:
            remote_empty(pr, isolation)
        return
    except Exception as exc:  # noqa: BLE001
        remote_failed(pr, exc)
        return
    finally:
        stats.waiting -= 1
    _remote_done(pr, result)


def _remote_done(pr: PartitionRead, result: bytes | memoryview | FetchDataInfo) -> None:
    """A remote read's answer into ``pr.data``: the batches (bytes or a view of read-ahead memory,
    sent uncopied), and for read_committed (a FetchDataInfo) their aborted transactions."""
    d = pr.data
    if isinstance(result, FetchDataInfo):
        d.records = result.records or b""
        d.aborted_transactions = aborted_of(result)
    else:
        d.records = result or b""
        d.aborted_transactions = None


def remote_empty(pr: PartitionRead, isolation: FetchIsolation) -> None:
    """No remote bytes this time (a spent fetch.max.bytes, a read past remote.fetch.max.wait.ms):
    the client asks again."""
    pr.data.records = b""
    pr.data.aborted_transactions = [] if isolation is FetchIsolation.TXN_COMMITTED else None


def remote_failed(pr: PartitionRead, exc: BaseException) -> None:
    """The partition answers the read's error (Kafka's DelayedRemoteFetch: the remote read's exception
    as the partition's error code; a failed remote read is UNKNOWN_SERVER_ERROR)."""
    d = pr.data
    d.error_code = error_code_of(exc)
    if not isinstance(exc, KafkaError):
        _remote_bugs.failed((pr.topic, pr.partition), exc, "remote read of %s-%d at %d failed",
                            pr.topic, pr.partition, pr.fetch_offset)
    d.records = b""
    d.aborted_transactions = None
