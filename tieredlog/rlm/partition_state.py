"""What the RLM's tasks of one partition share while this broker leads or follows it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tieredlog.log.types import TopicPartition
from tieredlog.rsm.api import TopicIdPartition


@dataclass
class PartitionState:
    tp: TopicPartition
    tip: TopicIdPartition
    copied_offset: int | None = None  # highest offset known copied; None = ask the RLMM first
    log_start_checked: bool = False
    # the log start offset last published to the tier for readers without a broker
    published_log_start: int | None = None
    being_copied: set[uuid.UUID] = field(default_factory=set)  # segment ids the copy task is uploading
    copy_disabled_reason: str | None = None
    # the first remote offset not cleaned remotely: None until read from the tier, where each leader
    # keeps it (published_clean_offset: what it holds there now)
    remote_clean_offset: int | None = None
    published_clean_offset: int | None = None
