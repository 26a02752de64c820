"""spark_readers with transactions, without Spark: a partition tiered by the broker's own code (UnifiedLog,
the RLM's copier, LocalTieredStorage) read back through the fsspec RSM from a file:// URL.

The partition (each line a batch; ``Pn`` a transactional producer, ``*`` its marker)::

    A  P1 P2 P3 plain P1*ABORT           remote
    B  plain P2*COMMIT P3 plain          remote, no txn index
    C  P3*ABORT plain                    remote
    D  plain P5 P5*ABORT P6 plain        remote: P6 is open at the end of the tiered part
    L  P6*ABORT plain                    local only
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from txn_layout import ABORT, COMMIT, TxnPartition, tier, tiered_log

from spark_readers.decoder import kafka_schema
from spark_readers.options import OptionError, parse_options
from spark_readers.planner import PlanError, plan
from spark_readers.read import read_task
from spark_readers.storage import open_storage, storage_spec
from tieredlog.rsm.api import IndexType

TOPIC = "txn"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[TxnPartition, Path]:
    p = TxnPartition(tiered_log(tmp_path / "logs", TOPIC))
    for pid in (1, 2, 3):  # A
        p.txn(pid)
    p.plain()
    p.end(1, ABORT)
    p.roll()
    p.plain()  # B
    p.end(2, COMMIT)
    p.txn(3)
    p.plain()
    p.roll()
    p.end(3, ABORT)  # C
    p.plain()
    p.roll()
    p.plain()  # D
    p.txn(5)
    p.end(5, ABORT)
    p.txn(6)
    p.plain()
    p.roll()
    p.end(6, ABORT)  # L
    p.plain()
    rlm = tier(p.plog, tmp_path / "remote", tmp_path / "logs")
    rlm.shutdown()
    assert p.plog.local_log_start_offset == p.segments[-1][1] + 1
    assert p.segments == [(0, 8), (9, 15), (16, 18), (19, 27)]
    assert p.aborted == [(1, 0, 8), (3, 4, 16), (5, 21, 23), (6, 24, 28)]
    return p, tmp_path / "remote"


def read(folder: Path, **extra: str) -> tuple[list, list[tuple[int, bytes]]]:
    opts = parse_options({"path": folder.as_uri(), "topic": TOPIC, **extra})
    rsm = open_storage(storage_spec(opts.path, opts.storage))
    tasks = plan(rsm, opts)
    table = pa.Table.from_batches([read_task(rsm, t, False) for t in tasks], schema=kafka_schema(False))
    return tasks, [(r["offset"], r["value"]) for r in table.to_pylist()]


def test_read_committed_is_the_default_and_drops_aborted_records_up_to_the_stable_end(layout) -> None:
    p, folder = layout
    tasks, rows = read(folder)
    stable_end = 24  # P6 is open at the end of the tiered part: its marker is not tiered
    assert rows == [(o, p.values[o]) for o in sorted(p.kept) if o < stable_end]
    # P1's and P3's records (P3's span three segments, aborted by a marker in a later one) and P5's
    dropped = {o for o in p.values if o < stable_end} - p.kept
    assert dropped == {0, 1, 4, 5, 12, 13, 21, 22}
    # each task carries the aborted transactions overlapping its slice, wherever their markers are
    assert [(t.from_offset, t.to_offset, t.aborted) for t in tasks] == [
        (0, 9, ((1, 0, 8), (3, 4, 16))), (9, 16, ((3, 4, 16),)), (16, 19, ((3, 4, 16),)), (19, 24, ((5, 21, 23),))]
    assert read(folder, **{"kafka.isolation.level": "READ_COMMITTED"})[1] == rows


def test_read_uncommitted_reads_every_record_of_the_tiered_part(layout) -> None:
    p, folder = layout
    tasks, rows = read(folder, **{"kafka.isolation.level": "read_uncommitted"})
    tiered_end = p.segments[-1][1] + 1
    assert rows == [(o, p.values[o]) for o in sorted(p.values) if o < tiered_end]  # no marker is a row
    assert all(t.aborted == () for t in tasks)


def test_only_the_txn_indexes_the_manifests_list_are_fetched_once_each(layout) -> None:
    p, folder = layout
    opts = parse_options({"path": folder.as_uri(), "topic": TOPIC, "maxBytesPerPartition": "100"})
    rsm = open_storage(storage_spec(opts.path, opts.storage))
    fetched: list[tuple[IndexType, int]] = []
    fetch_index = rsm.fetch_index

    def recording(md, index_type):  # noqa: ANN001, ANN202
        fetched.append((index_type, md.start_offset))
        return fetch_index(md, index_type)

    rsm.fetch_index = recording  # type: ignore[method-assign]
    try:
        tasks = plan(rsm, opts)
    finally:
        del rsm.fetch_index
    assert len(tasks) > len(p.segments)  # slices split at batch boundaries keep their slice's list
    assert {t.aborted for t in tasks if t.from_offset == 0} == {((1, 0, 8), (3, 4, 16))}
    assert [o for kind, o in fetched if kind is IndexType.TRANSACTION] == [0, 16, 19]  # A, C, D; not B
    assert [o for kind, o in fetched if kind is IndexType.PRODUCER_SNAPSHOT] == [19]  # the last segment's


def test_options_and_errors(layout) -> None:
    p, folder = layout
    with pytest.raises(OptionError, match="kafka.isolation.level must be read_committed or read_uncommitted"):
        parse_options({"path": folder.as_uri(), "topic": TOPIC, "kafka.isolation.level": "committed"})
    with pytest.raises(PlanError, match="offsets from 24 are in a transaction whose marker is not in the remote tier"):
        read(folder, endingOffsets='{"txn":{"0":26}}')
    # read_uncommitted reads up to the tiered end; past it is the brokers' tail
    assert read(folder, endingOffsets='{"txn":{"0":26}}', **{"kafka.isolation.level": "read_uncommitted"})[1]
    with pytest.raises(PlanError, match="offsets from 28 are not in the remote tier yet"):
        read(folder, endingOffsets='{"txn":{"0":29}}', **{"kafka.isolation.level": "read_uncommitted"})
