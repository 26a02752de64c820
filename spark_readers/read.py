"""The executor side of a :class:`~spark_readers.planner.ReadTask`: one ranged GET, decoded to Arrow."""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from spark_readers.decoder import CorruptSegmentError, Source, decode_record_batches, decode_records
from spark_readers.planner import ReadTask
from tieredlog.rsm.api import RemoteStorageException
from tieredlog.rsm.objectstore import ObjectStoreRemoteStorageManager


def read_task(rsm: ObjectStoreRemoteStorageManager, task: ReadTask, include_headers: bool) -> pa.RecordBatch:
    """The task's rows as one Arrow batch."""
    data, source = _fetch(rsm, task)
    return decode_records(data, source, task.from_offset, task.to_offset, include_headers, task.aborted)


def read_task_batches(rsm: ObjectStoreRemoteStorageManager, task: ReadTask,
                      include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The task's rows in Arrow batches of a few MiB of the segment each, decoded one at a time: Spark
    takes in one while the next decodes."""
    data, source = _fetch(rsm, task)
    yield from decode_record_batches(data, source, task.from_offset, task.to_offset, include_headers, task.aborted)


def _fetch(rsm: ObjectStoreRemoteStorageManager, task: ReadTask) -> tuple[bytes, Source]:
    try:
        with rsm.fetch_log_segment(task.metadata, task.start_position, task.end_position) as stream:
            # the expected size in one read: a bare read() of a whole object goes 8 KiB at a time
            end = task.metadata.segment_size_in_bytes - 1 if task.end_position is None else task.end_position
            data = stream.read(max(end - task.start_position + 1, 0))
            data += stream.read()  # an object longer than its metadata says is read whole, as before
    except RemoteStorageException as exc:
        raise RemoteStorageException(f"{task.object_name}: cannot read bytes {task.start_position}.."
                                     f"{'' if task.end_position is None else task.end_position}: {exc}") from None
    if task.end_position is not None and len(data) != task.end_position - task.start_position + 1:
        raise CorruptSegmentError(f"{task.object_name}: object ends at byte {task.start_position + len(data)}, "
                                  f"before byte {task.end_position} its offset index points to")
    return data, Source(task.topic, task.partition, task.object_name, task.start_position)
