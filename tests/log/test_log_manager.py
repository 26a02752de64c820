"""LogManager: loading dirs, checkpoints, clean-shutdown marker, topic-name validation, deletion, retention."""

from __future__ import annotations

import logging
import re

import pytest
from helpers import wait_for

from tieredlog import errors
from tieredlog.log.checkpoints import OffsetCheckpointFile
from tieredlog.log.config import LogConfig
from tieredlog.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, validate_topic_name
from tieredlog.log.types import TopicPartition
from tieredlog.records.record import build_batch

TS = 1_700_000_000_000


def batch(n=2):
    return build_batch([(b"k", b"v" * 20, [], TS + i) for i in range(n)])


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a b", "t" * 250, "é"])
def test_illegal_topic_names_rejected(tmp_path, name):
    with pytest.raises(errors.InvalidTopicError):
        validate_topic_name(name)
    mgr = LogManager([tmp_path], LogConfig())
    with pytest.raises(errors.InvalidTopicError):
        mgr.get_or_create_log(TopicPartition(name, 0))
    assert [p.name for p in tmp_path.iterdir()] == []


def test_legal_names_and_dir_layout(tmp_path):
    mgr = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig())
    l0 = mgr.get_or_create_log(TopicPartition("my.topic_x-1", 0))
    l1 = mgr.get_or_create_log(TopicPartition("my.topic_x-1", 1))
    assert l0.dir == tmp_path / "a" / "my.topic_x-1-0"
    assert l1.dir == tmp_path / "b" / "my.topic_x-1-1"  # the dir with the fewest partitions
    assert mgr.get_or_create_log(TopicPartition("my.topic_x-1", 0)) is l0
    validate_topic_name("t" * 249)


def test_high_watermarks_are_checkpointed_on_their_own_interval(tmp_path):
    """Kafka's replica.high.watermark.checkpoint.interval.ms (5 s) is shorter than the other checkpoints'
    60 s: a broker killed -9 restarts from high watermarks seconds old, not a minute."""
    mgr = LogManager([tmp_path], LogConfig(segment_bytes=len(batch()) * 2))
    plog = mgr.get_or_create_log(TopicPartition("t", 0))
    for _ in range(3):
        plog.append_as_leader(batch(), 1)
    plog.update_high_watermark(6)
    mgr.startup(checkpoint_ms=600_000, high_watermark_checkpoint_ms=50)
    try:
        path = tmp_path / "replication-offset-checkpoint"
        wait_for(lambda: path.exists() and OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 6},
                 "the high watermark checkpointed")
        assert not (tmp_path / "recovery-point-offset-checkpoint").exists()
    finally:
        mgr.shutdown()


def test_shutdown_checkpoints_and_clean_reload(tmp_path):
    mgr = LogManager([tmp_path], LogConfig(segment_bytes=len(batch()) * 2))
    plog = mgr.get_or_create_log(TopicPartition("t", 0))
    for _ in range(5):
        plog.append_as_leader(batch(), 1)
    plog.update_high_watermark(8)
    plog.maybe_increment_log_start_offset(3)
    mgr.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    tp = TopicPartition("t", 0)
    assert OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {tp: 10}
    assert OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read() == {tp: 8}
    assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read() == {tp: 3}
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n1 3\n"  # truncated from the start with the log
    mgr2 = LogManager([tmp_path], LogConfig(segment_bytes=len(batch()) * 2))
    assert mgr2.had_clean_shutdown[tmp_path]
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a later crash must look unclean
    plog2 = mgr2.get_log(tp)
    assert (plog2.log_start_offset, plog2.high_watermark, plog2.log_end_offset) == (3, 8, 10)
    assert plog2.append_as_leader(batch(), 1).first_offset == 10


def test_delete_log_renames_at_once_and_deletes_after_the_delay(tmp_path):
    clock = [TS]
    tp = TopicPartition("t", 0)
    mgr = LogManager([tmp_path], LogConfig(file_delete_delay_ms=60_000), clock=lambda: clock[0])
    mgr.get_or_create_log(tp).append_as_leader(batch(), 0)
    assert mgr.delete_log(tp)
    assert mgr.get_log(tp) is None
    [doomed] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert re.fullmatch(r"t-0\.[0-9a-f]{32}-delete", doomed.name)
    assert mgr.pending_log_deletes() == [doomed]
    # The name is free at once: a new partition t-0 starts empty in its own directory.
    assert mgr.get_or_create_log(tp).log_end_offset == 0
    assert mgr.delete_logs() == 0 and doomed.exists()  # file.delete.delay.ms has not passed
    clock[0] += 60_000
    assert mgr.delete_logs() == 1 and not doomed.exists()
    assert (tmp_path / "t-0").is_dir() and mgr.pending_log_deletes() == []


def test_delete_log_finishes_in_the_background(tmp_path):
    tp = TopicPartition("t", 0)
    mgr = LogManager([tmp_path], LogConfig(file_delete_delay_ms=0))
    mgr.get_or_create_log(tp).append_as_leader(batch(), 0)
    mgr.checkpoint_recovery_points()
    assert tp in OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert mgr.delete_log(tp)
    wait_for(lambda: not any(p.is_dir() for p in tmp_path.iterdir()))
    wait_for(lambda: tp not in OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read())
    mgr.shutdown()


def test_restart_finishes_pending_deletes(tmp_path):
    """A "-delete" dir left by a crash never loads as a partition; startup removes it in the background."""
    leftover = tmp_path / "t-1.0123abcd-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"")
    mgr = LogManager([tmp_path], LogConfig())
    assert mgr.all_logs() == [] and mgr.pending_log_deletes() == [leftover]
    mgr.startup()
    wait_for(lambda: not leftover.exists())
    assert mgr.pending_log_deletes() == []
    mgr.shutdown()


def test_cleanup_and_flush_tasks(tmp_path):
    clock = [TS]
    cfg = LogConfig(segment_bytes=len(batch()) * 2, retention_ms=1000, file_delete_delay_ms=0, flush_ms=500)
    mgr = LogManager([tmp_path], cfg, clock=lambda: clock[0])
    plog = mgr.get_or_create_log(TopicPartition("t", 0))
    for _ in range(4):
        plog.append_as_leader(batch(), 0)
    plog.update_high_watermark(8)
    clock[0] += 600
    assert mgr.flush_dirty_logs() == 1 and plog.recovery_point == 8
    clock[0] += 5000
    assert mgr.cleanup_logs() == 2
    assert plog.log_start_offset == 8


def test_topic_overrides(tmp_path):
    mgr = LogManager([tmp_path], LogConfig(), topic_configs={"big": LogConfig(segment_bytes=12345)})
    assert mgr.get_or_create_log(TopicPartition("big", 0)).config.segment_bytes == 12345
    assert mgr.get_or_create_log(TopicPartition("small", 0)).config.segment_bytes == LogConfig().segment_bytes


def test_broker_owned_folders_are_skipped_quietly(tmp_path, caplog):
    for name in ("remote-log-metadata-snapshots", "remote-log-index-cache", "remote-storage", "junk"):
        (tmp_path / name).mkdir()
    with caplog.at_level(logging.DEBUG, logger="tieredlog.log.log_manager"):
        mgr = LogManager([tmp_path], LogConfig())
    assert mgr.all_logs() == []
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "junk" in warned[0]
    assert all((tmp_path / n).is_dir() for n in ("remote-log-metadata-snapshots", "remote-log-index-cache"))


def test_remove_expired_producers(tmp_path):
    clock = [TS]
    tp = TopicPartition("t", 0)
    mgr = LogManager([tmp_path], LogConfig(), clock=lambda: clock[0], producer_id_expiration_ms=1000)
    plog = mgr.get_or_create_log(tp)
    # Producer 1 wrote at TS, producer 2 has a transaction open: never expired while it is.
    plog.append_as_leader(build_batch([(b"k", b"v", [], TS)], producer_id=1, producer_epoch=0, base_sequence=0), 0)
    plog.append_as_leader(
        build_batch([(b"k", b"v", [], TS)], producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True), 0
    )
    assert mgr.remove_expired_producers(TS + 999) == 0
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append_as_leader(build_batch([(b"k", b"v", [], TS)], producer_id=1, producer_epoch=0, base_sequence=5), 0)
    clock[0] = TS + 1000
    mgr.cleanup_logs()  # the periodic retention task expires producers too
    assert set(plog.producer_state.active_producers) == {2}
    # An expired producer is unknown again, so any sequence is accepted (KIP-360), as in Kafka.
    plog.append_as_leader(build_batch([(b"k", b"v", [], TS + 1000)], producer_id=1, producer_epoch=0, base_sequence=5), 0)
    # The setting also applies to partitions loaded from disk.
    mgr.shutdown()
    mgr2 = LogManager([tmp_path], LogConfig(), clock=lambda: clock[0], producer_id_expiration_ms=1000)
    assert mgr2.get_log(tp).producer_state.producer_id_expiration_ms == 1000


@pytest.mark.parametrize("threads", [0, 3])
def test_recovery_threads_load_every_dir(tmp_path, threads):
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = LogManager(dirs, LogConfig())
    for p in range(6):
        plog = mgr.get_or_create_log(TopicPartition("t", p))
        for _ in range(p + 1):
            plog.append_as_leader(batch(), 0)
    del mgr  # crash: unclean load
    mgr2 = LogManager(dirs, LogConfig(), num_recovery_threads_per_data_dir=threads)
    assert mgr2.num_recovery_threads_per_data_dir == max(1, threads)
    assert {plog.topic_partition.partition: plog.log_end_offset for plog in mgr2.all_logs()} == {p: 2 * (p + 1) for p in range(6)}
    assert not any(mgr2.had_clean_shutdown.values())


def test_partition_in_two_dirs_fails_before_loading(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d / "t-0").mkdir(parents=True)
    (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).touch()
    with pytest.raises(errors.KafkaStorageError):
        LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), num_recovery_threads_per_data_dir=2)
    assert list((tmp_path / "a" / "t-0").iterdir()) == []  # nothing was created in it


@pytest.mark.parametrize("damage", [b"version: 0\ntopic_id: AAAA\n", b"version: 7\ntopic_id: x\n", b"\xff", b""])
def test_a_damaged_partition_metadata_is_rewritten_from_the_topic_id(tmp_path, caplog, damage):
    # The LogManager loads partitions before it knows their topics' ids: the damaged file is one line,
    # the log loads, and the id the broker passes in later is written back.
    import uuid

    from tieredlog.log.checkpoints import PartitionMetadataFile

    tid = uuid.uuid4()
    mgr = LogManager([tmp_path], LogConfig())
    mgr.get_or_create_log(TopicPartition("t", 0), tid).append_as_leader(batch(), 1)
    mgr.shutdown()
    meta = PartitionMetadataFile(tmp_path / "t-0" / "partition.metadata")
    meta.path.write_bytes(damage)
    with caplog.at_level(logging.WARNING):
        mgr2 = LogManager([tmp_path], LogConfig())
        assert mgr2.get_log(TopicPartition("t", 0)).topic_id is None
        plog = mgr2.get_or_create_log(TopicPartition("t", 0), tid)
    assert plog.topic_id == tid and meta.read() == tid and plog.log_end_offset == 2
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "partition.metadata" in lines[0], lines
    with pytest.raises(errors.InconsistentTopicIdError):
        mgr2.get_or_create_log(TopicPartition("t", 0), uuid.uuid4())
    mgr2.shutdown()
