"""The part of the RemoteStorageManager contract that keeps a compacted partition's remote clean offset
beside its segments: one small object per partition, written and read by name, with no listing.

An RSM that implements it (every :class:`~tieredlog.rsm.listing.ListableRemoteStorageManager` does, and a
plugin with a key layout of its own may, without the listing) lets whichever broker leads a compacted
tiered partition next go on cleaning its remote tier where the last leader left it; without it a new
leader cleans the tier again from its start (docs/compaction.md, "Clean offset")."""

from __future__ import annotations

import abc

from tieredlog.rsm.api import TopicIdPartition


class RemoteCleanerOffsetStore(abc.ABC):
    """Where the remote tier of a compacted partition is clean up to, kept in the tier. Blocking calls,
    made off the event loop by the leader's remote cleaning task."""

    @abc.abstractmethod
    def write_cleaner_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        """Publish where the remote tier of a compacted partition is clean up to (the remote cleaner's
        ``cleaner-offset-checkpoint``) beside its segments, replacing the last one, so that the next
        leader, on any broker, does not clean the tier again from its start; ``None`` removes it (removing
        one that is not there is not an error)."""

    @abc.abstractmethod
    def read_cleaner_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        """The offset last published by :meth:`write_cleaner_offset`; None when there is none. Raises
        :class:`~tieredlog.rsm.listing.MalformedPartitionObjectError` for an object that is not one, and
        RemoteStorageException when the store cannot be read (the caller then waits, it does not guess)."""
