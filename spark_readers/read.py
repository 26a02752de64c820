"""The executor side of a :class:`~spark_readers.planner.ReadTask`: one ranged GET, decoded to Arrow."""

from __future__ import annotations

import pyarrow as pa

from spark_readers.decoder import CorruptSegmentError, Source, decode_records
from spark_readers.planner import ReadTask
from tieredlog.rsm.api import RemoteStorageException
from tieredlog.rsm.objectstore import ObjectStoreRemoteStorageManager


def read_task(rsm: ObjectStoreRemoteStorageManager, task: ReadTask, include_headers: bool) -> pa.RecordBatch:
    try:
        with rsm.fetch_log_segment(task.metadata, task.start_position, task.end_position) as stream:
            data = stream.read()
    except RemoteStorageException as exc:
        raise RemoteStorageException(f"{task.object_name}: cannot read bytes {task.start_position}.."
                                     f"{'' if task.end_position is None else task.end_position}: {exc}") from None
    if task.end_position is not None and len(data) != task.end_position - task.start_position + 1:
        raise CorruptSegmentError(f"{task.object_name}: object ends at byte {task.start_position + len(data)}, "
                                  f"before byte {task.end_position} its offset index points to")
    source = Source(task.topic, task.partition, task.object_name, task.start_position)
    return decode_records(data, source, task.from_offset, task.to_offset, include_headers, task.aborted)
