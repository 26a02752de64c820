import uuid

import pytest

from tieredlog.formats.checkpoints import (
    CorruptCheckpointError,
    encode_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
)
from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.log.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile, PartitionMetadataFile
from tieredlog.log.types import EpochEntry, TopicPartition, parse_partition_dir


def test_topic_partition_str_and_dir_name_round_trip():
    tp = TopicPartition("orders-eu-west", 12)
    assert str(tp) == "orders-eu-west-12"
    assert parse_partition_dir(str(tp)) == tp
    assert parse_partition_dir("a-0") == TopicPartition("a", 0)


@pytest.mark.parametrize("name", ["nodash", "-3", "topic-", "topic-x", "topic-1.5", "topic-+1"])
def test_parse_partition_dir_rejects_bad_names(name):
    with pytest.raises(ValueError, match="partition directory"):
        parse_partition_dir(name)


def test_offset_checkpoint_round_trip_and_exact_text(tmp_path):
    f = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    assert f.read() == {}  # missing file reads as empty
    offsets = {TopicPartition("b", 1): 42, TopicPartition("a-x", 0): 0, TopicPartition("b", 0): 7}
    f.write(offsets)
    assert f.read() == offsets
    assert f.path.read_text() == "0\n3\na-x 0 0\nb 0 7\nb 1 42\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    f.write({})
    assert f.read() == {}
    assert f.path.read_text() == "0\n0\n"


def test_offset_checkpoint_reads_kafka_written_text(tmp_path):
    p = tmp_path / "replication-offset-checkpoint"
    p.write_text("0\n2\n__consumer_offsets 17 1234\nmy-topic 3 99\n")
    assert OffsetCheckpointFile(p).read() == {
        TopicPartition("__consumer_offsets", 17): 1234,
        TopicPartition("my-topic", 3): 99,
    }


@pytest.mark.parametrize(
    "text, line, reason",
    [
        ("1\n0\n", 1, "unrecognized version"),
        ("0\nabc\n", 2, "not a number"),
        ("0\n1\ntopic 0\n", 3, "expected 3 fields"),
        ("0\n1\ntopic zero 5\n", 3, "invalid literal"),
        ("0\n2\ntopic 0 5\n", None, "expected 2 entries but found 1"),
        ("0\n", 2, "missing entry count"),
    ],
)
def test_offset_checkpoint_malformed_names_file_and_line(tmp_path, text, line, reason):
    p = tmp_path / "log-start-offset-checkpoint"
    p.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=reason) as ei:
        OffsetCheckpointFile(p).read()
    assert str(p) in str(ei.value)
    assert ei.value.line_no == line
    if line is not None:
        assert f"line {line}" in str(ei.value)


def test_leader_epoch_checkpoint_round_trip(tmp_path):
    f = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    entries = [EpochEntry(0, 0), EpochEntry(2, 15), EpochEntry(5, 1000)]
    f.write(entries)
    assert f.path.read_text() == "0\n3\n0 0\n2 15\n5 1000\n"
    assert f.read() == entries
    assert encode_leader_epoch_checkpoint(entries) == f.path.read_bytes()
    assert parse_leader_epoch_checkpoint(f.path.read_bytes()) == entries


def test_leader_epoch_checkpoint_malformed(tmp_path):
    p = tmp_path / "leader-epoch-checkpoint"
    p.write_text("0\n2\n0 0\n1 x\n")
    with pytest.raises(CorruptCheckpointError, match="line 4"):
        LeaderEpochCheckpointFile(p).read()
    with pytest.raises(CorruptCheckpointError, match="remote-index.*line 3"):
        parse_leader_epoch_checkpoint(b"0\n1\n7\n", "remote-index")
    with pytest.raises(CorruptCheckpointError, match="not UTF-8 text \\(byte 4\\)"):
        parse_leader_epoch_checkpoint(b"0\n1\n\xff 0\n")


def test_partition_metadata_round_trip(tmp_path):
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    assert f.read() is None
    u = uuid.uuid4()
    f.write(u)
    assert f.path.read_text() == f"version: 0\ntopic_id: {uuid_to_kafka_str(u)}\n"
    assert f.read() == u


@pytest.mark.parametrize(
    "text, line",
    [
        ("version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n", 1),
        ("version: 0\n", 2),
        ("version: 0\ntopicid: AAAAAAAAAAAAAAAAAAAAAA\n", 2),
        ("version: 0\ntopic_id: nope\n", 2),
    ],
)
def test_partition_metadata_malformed(tmp_path, text, line):
    p = tmp_path / "partition.metadata"
    p.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=f"partition.metadata, line {line}"):
        PartitionMetadataFile(p).read()
