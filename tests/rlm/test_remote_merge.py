"""The remote cleaner's grouping rule (tieredlog.rlm.remote_merge): which adjacent cleaned remote segments are
written as one replacement, as Kafka's groupSegmentsBySize bounds them, on the bytes cleaning kept."""

from __future__ import annotations

from tieredlog.log.index import INT32_MAX
from tieredlog.rlm.remote_merge import (
    END_MARKER_BYTES,
    CleanedSize,
    joins_group,
    lineage_holds,
    merged_leader_epochs,
)


def part(start: int, end: int, log_bytes: int = 100, epochs: dict[int, int] | None = None, offset_index: int = 0,
         time_index: int = 0) -> CleanedSize:
    return CleanedSize(start, end, epochs if epochs is not None else {0: start}, log_bytes, offset_index, time_index)


def test_a_part_joins_while_the_group_fits_segment_bytes_with_its_end_marker() -> None:
    group = [part(0, 9, 400), part(10, 19, 300)]
    assert joins_group(group, part(20, 29, 1000 - 700 - END_MARKER_BYTES), 1000, 1 << 20)
    assert not joins_group(group, part(20, 29, 1000 - 700 - END_MARKER_BYTES + 1), 1000, 1 << 20)
    assert joins_group([part(0, 9, 0)], part(10, 19, 0), END_MARKER_BYTES, 1 << 20)  # empty parts merge


def test_indexes_must_fit_segment_index_bytes() -> None:
    # one entry more per part than the parts have: the merged indexes are rebuilt batch by batch
    group = [part(0, 9, offset_index=80, time_index=12)]
    assert joins_group(group, part(10, 19, offset_index=80, time_index=12), 1 << 20, 160 + 2 * 8)
    assert not joins_group(group, part(10, 19, offset_index=80, time_index=12), 1 << 20, 160 + 2 * 8 - 1)
    assert not joins_group(group, part(10, 19, time_index=200), 1 << 20, 200)


def test_offsets_must_fit_one_segments_int32_relative_offsets() -> None:
    assert joins_group([part(0, 9)], part(10, INT32_MAX), 1 << 20, 1 << 20)
    assert not joins_group([part(0, 9)], part(10, INT32_MAX + 1), 1 << 20, 1 << 20)


def test_a_hole_or_an_epoch_going_back_ends_the_group() -> None:
    assert not joins_group([part(0, 9)], part(11, 19), 1 << 20, 1 << 20)  # offset 10 is not in the tier
    assert not joins_group([part(0, 9, epochs={3: 0})], part(10, 19, epochs={2: 10}), 1 << 20, 1 << 20)
    assert joins_group([part(0, 9, epochs={2: 0, 3: 5})], part(10, 19, epochs={3: 10, 4: 15}), 1 << 20, 1 << 20)


def test_the_merged_epochs_and_the_last_parts_checkpoint() -> None:
    group = [part(0, 9, epochs={0: 0, 1: 5}), part(10, 19, epochs={1: 10}), part(20, 29, epochs={1: 20, 3: 25})]
    assert merged_leader_epochs(group) == {0: 0, 1: 5, 3: 25}
    assert lineage_holds(group, [(0, 0), (1, 5), (3, 25)])
    # the last part's leader lost epoch 1's start at 5 (an unclean election truncated it): not one lineage
    assert not lineage_holds(group, [(0, 0), (2, 7), (3, 25)])
