"""A local fetch sends whole batches only, while its min_bytes and byte budgets count Kafka's slice
(which may end inside a batch), so a fetch is answered, parked and budgeted as Kafka's is."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, Hashable, Iterable

from tieredlog.log.config import LogConfig
from tieredlog.log.types import FetchIsolation, TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import build_batch
from tieredlog.replication.data_path import FetchParams, PartitionRead
from tieredlog.replication.fetcher import FetcherConfig
from tieredlog.replication.replica_manager import ReplicaManager


class NeverParks:
    """A fetch purgatory that fails the test if a fetch parks."""

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool:
        raise AssertionError("the fetch parked although Kafka's slice reached min_bytes")

    def notify(self, key: Hashable) -> None:
        pass


def _log_of_six_batches(path) -> tuple[UnifiedLog, int]:
    """Six equal batches of two records each (offsets 0, 2, ... 10), all below the high watermark."""
    plog = UnifiedLog(path / "t-0", LogConfig())
    batch_size = 0
    for i in range(6):
        batch = build_batch([(b"k", b"v" * 700, [], 1_700_000_000_000 + i)] * 2)
        batch_size = len(batch)
        plog.append_as_leader(batch, leader_epoch=0)
    plog.update_high_watermark(plog.log_end_offset)
    return plog, batch_size


def _replica_manager(plog: UnifiedLog, tp: TopicPartition) -> ReplicaManager:
    logs: Any = SimpleNamespace(get_log=lambda _tp: plog)
    rm = ReplicaManager(0, logs, log_config_for=lambda _t: LogConfig(), fetcher_config=FetcherConfig(),
                        replica_lag_time_max_ms=30_000, on_high_watermark_moved=lambda _tp: None,
                        fetch_purgatory=NeverParks())
    rm.add_sole_replica(tp, plog)
    return rm


def test_fetch_sends_whole_batches_and_counts_the_slice_for_min_bytes(tmp_path) -> None:
    plog, batch_size = _log_of_six_batches(tmp_path)
    rm = _replica_manager(plog, TopicPartition("t", 0))
    # max bytes and min_bytes both end inside the third batch: two whole batches go, and the
    # fetch is answered at once, as Kafka's (its slice, partial batch included, reaches min_bytes)
    limit = 2 * batch_size + batch_size // 2
    first = PartitionRead("t", 0, 0, limit)
    params = FetchParams(-1, 60_000, limit, limit + 10, FetchIsolation.HIGH_WATERMARK)
    try:
        asyncio.run(rm.fetch_messages(params, [first]))
    finally:
        plog.close()
    records = first.data.records
    assert first.data.error_code == 0
    data = records.read_bytes()  # type: ignore[union-attr]
    assert len(data) == 2 * batch_size
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 2]


def test_fetch_budget_counts_the_slice_for_later_partitions(tmp_path) -> None:
    """The response's max bytes is spent as Kafka spends it: the first partition's slice, partial
    batch included, is what the later partitions' budget loses."""
    plog, batch_size = _log_of_six_batches(tmp_path)
    rm = _replica_manager(plog, TopicPartition("t", 0))
    part = 2 * batch_size + batch_size // 2
    # the response's max leaves the second read half a batch after the first's slice: nothing whole
    # (counting only the two whole batches sent would leave it a whole one)
    params = FetchParams(-1, 0, 1, 3 * batch_size, FetchIsolation.HIGH_WATERMARK)
    reads = [PartitionRead("t", 0, 0, part), PartitionRead("t", 0, 6, part)]
    try:
        asyncio.run(rm.fetch_messages(params, reads))
    finally:
        plog.close()
    assert len(reads[0].data.records) == 2 * batch_size  # type: ignore[arg-type]
    assert len(reads[1].data.records) == 0  # type: ignore[arg-type]
