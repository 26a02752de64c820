"""Units of KIP-848's online migration: a classic member's ConsumerGroupMemberMetadataValue carries its
ClassicMemberMetadata in tagged field 0 (Kafka's layout) and reads back; the consumer protocol's codec
reads a subscription's owned partitions and writes an assignment a client reads."""

from __future__ import annotations

from tieredlog.coordinator.consumer_group import records
from tieredlog.coordinator.consumer_group.member import ClassicMemberMetadata
from tieredlog.server.consumer_protocol import ConsumerProtocolCodec


def test_member_metadata_with_classic_metadata_round_trips() -> None:
    classic = ClassicMemberMetadata(6000, (("range", b"\x00\x01abc"), ("roundrobin", b"")))
    stored = records.StoredMemberMetadata(None, "rack-a", "client", "/127.0.0.1", ("t1", "t2"), None, 30000, None,
                                          classic)
    value = records.encode_member_metadata(stored)
    # the tagged-field section: one field, tag 0, its size, then the presence byte of the nullable struct
    tail = records.encode_member_metadata(records.StoredMemberMetadata(
        None, "rack-a", "client", "/127.0.0.1", ("t1", "t2"), None, 30000, None))
    assert value[:len(tail) - 1] == tail[:-1]
    assert value[len(tail) - 1:len(tail) + 1] == b"\x01\x00" and value[len(tail) + 2] == 1
    assert records.decode_member_metadata(value) == stored
    assert records.decode_member_metadata(tail).classic is None


def test_codec_reads_owned_partitions_and_writes_assignments() -> None:
    import io

    from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription, TopicPartition
    from kio.serial import entity_writer

    buf = io.BytesIO()
    buf.write((1).to_bytes(2, "big"))
    entity_writer(ConsumerProtocolSubscription)(buf, ConsumerProtocolSubscription(
        topics=("a", "b"), user_data=None, owned_partitions=(TopicPartition(topic="a", partitions=(0, 2)),)))
    codec = ConsumerProtocolCodec()
    sub = codec.subscription(buf.getvalue())
    assert sub is not None and sub.topics == ("a", "b") and sub.owned == {"a": frozenset({0, 2})}
    assert sub.rack_id is None
    data = codec.encode_assignment({"a": [1, 0], "b": [3]}, buf.getvalue())
    assert data[:2] == b"\x00\x01"
    assert codec.assignment(data) == {"a": frozenset({0, 1}), "b": frozenset({3})}
    assert codec.assignment(b"") == {}
    assert codec.assignment(b"\x00\x01\xff") is None
    assert codec.subscription(b"\xff\xff") is None
