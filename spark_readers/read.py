"""The executor side of a :class:`~spark_readers.planner.ReadTask`: one ranged GET, decoded to Arrow."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa

from spark_readers.decoder import CorruptSegmentError, Source, checked_batches, decode_checked_batches, decode_records
from spark_readers.planner import ReadTask
from tieredlog.records.batch import BatchHeader
from tieredlog.rsm.api import RemoteResourceNotFoundException, RemoteStorageException, RemoteStorageManager

log = logging.getLogger(__name__)


class SegmentDeletedError(RemoteStorageException):
    """A planned segment is gone (remote retention, DeleteRecords): the read fails rather than miss rows,
    unless ``failOnDataLoss=false`` (:func:`fetched_task_batches`)."""


@dataclass(frozen=True, slots=True)
class FetchedTask:
    """A task's bytes and its batches that hold wanted records, checked (:func:`checked_task`)."""

    data: bytes
    source: Source
    batches: list[tuple[int, BatchHeader]]


def read_task(rsm: RemoteStorageManager, task: ReadTask, include_headers: bool) -> pa.RecordBatch:
    """The task's rows as one Arrow batch."""
    data, source = fetch_bytes(rsm, task)
    return decode_records(data, source, task.from_offset, task.to_offset, include_headers, task.aborted)


def read_task_batches(rsm: RemoteStorageManager, task: ReadTask, include_headers: bool,
                      fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
    """The task's rows in Arrow batches of a few MiB of the segment each, decoded one at a time: Spark
    takes in one while the next decodes."""
    yield from fetched_task_batches(task, lambda: checked_task(task, fetch_bytes(rsm, task)), include_headers,
                                    fail_on_data_loss)


def fetched_task_batches(task: ReadTask, fetched: Callable[[], FetchedTask], include_headers: bool,
                         fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """:func:`read_task_batches` of the bytes ``fetched()`` gives (:func:`checked_task` of
    :func:`fetch_bytes`, the GET maybe already running in another thread). A planned segment deleted
    under the read: with ``failOnDataLoss`` (the default) the read fails; without, its rows are
    skipped, as Spark's Kafka source skips offsets its consumer no longer finds, and one line says
    which."""
    try:
        data = fetched()
    except SegmentDeletedError:
        if fail_on_data_loss:
            raise
        log.warning("%s-%d: segment %s was deleted from the remote tier while it was read; offsets %d..%d skipped "
                    "(failOnDataLoss=false)", task.topic, task.partition, task.object_name, task.from_offset,
                    task.to_offset - 1)
        return
    yield from decode_checked_batches(data.data, data.source, data.batches, task.from_offset, task.to_offset,
                                      include_headers)


def checked_task(task: ReadTask, fetched: tuple[bytes, Source]) -> FetchedTask:
    """The task's bytes (:func:`fetch_bytes`) with its batches' headers and CRCs checked. Done by the
    thread that decodes: the fetching thread goes on to the next GET at once, so the store is not
    left idle while a task is checked."""
    data, source = fetched
    return FetchedTask(data, source, checked_batches(data, source, task.from_offset, task.to_offset, task.aborted))


def fetch_bytes(rsm: RemoteStorageManager, task: ReadTask) -> tuple[bytes, Source]:
    """The task's bytes (one ranged GET), checked to be all there."""
    # A whole segment is asked for as the range its metadata gives (Kafka's segmentSizeInBytes): a
    # bounded range arrives in one read, an open one goes through a stream read 8 KiB at a time.
    end = task.metadata.segment_size_in_bytes - 1 if task.end_position is None else task.end_position
    try:
        with rsm.fetch_log_segment(task.metadata, task.start_position, end) as stream:
            data = stream.read()
    except RemoteResourceNotFoundException:
        # never a silent hole: the planned rows of this task are gone with their segment
        raise SegmentDeletedError(f"{task.topic}-{task.partition}: segment {task.object_name} was deleted from the "
                                  f"remote tier while it was read (retention or DeleteRecords); offsets "
                                  f"{task.from_offset}..{task.to_offset - 1} were not read: read again") from None
    except RemoteStorageException as exc:
        raise RemoteStorageException(f"{task.object_name}: cannot read bytes {task.start_position}..{end}: "
                                     f"{exc}") from None
    if len(data) != end - task.start_position + 1:
        points = "its offset index points to" if task.end_position is not None else "its metadata gives"
        raise CorruptSegmentError(f"{task.object_name}: object ends at byte {task.start_position + len(data)}, "
                                  f"before byte {end} {points}")
    return data, Source(task.topic, task.partition, task.object_name, task.start_position)
