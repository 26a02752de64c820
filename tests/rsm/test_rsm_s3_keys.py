"""The shared object-key layout (tieredlog.rsm.keys): names are validated going in and coming back."""

import uuid

import pytest

from tieredlog.rsm.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tieredlog.rsm.keys import (
    ALL_SUFFIXES,
    InvalidKeyError,
    parse_listing,
    parse_segment_key,
    segment_key,
    segment_keys,
    uuid_from_base64,
    uuid_to_base64,
    validate_key_prefix,
    validate_topic,
)


def metadata(topic="t", partition=0, start=0, topic_id=None, segment_id=None) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(topic_id or uuid.uuid4(), topic, partition)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, segment_id or uuid.uuid4()), start, start + 1, 0, 0, 0, 1, {0: start})


def test_uuid_base64_matches_kafkas_string_form():
    # Kafka's Uuid.toString() of the ops.html example, decoded and re-encoded.
    text = "jF8s79t9SrG_PNqlwv7bAA"
    assert uuid_to_base64(uuid_from_base64(text)) == text
    value = uuid.UUID("8c5f2cef-db7d-4ab1-bf3c-daa5c2fedb00")
    assert uuid_to_base64(value) == text


@pytest.mark.parametrize("text", ["", "short", "jF8s79t9SrG_PNqlwv7bA=", "jF8s79t9SrG_PNqlwv7bAB", "jF8s79t9SrG/PNqlwv7bAA"])
def test_bad_base64_uuids_are_rejected(text):
    with pytest.raises(InvalidKeyError):
        uuid_from_base64(text)


def test_key_has_kafka_layout_and_parses_back():
    md = metadata("orders.v1_x-y", 17, 1234)
    key = segment_key("pre/", md, "log")
    tp = md.topic_id_partition
    assert key == (f"pre/orders.v1_x-y-{uuid_to_base64(tp.topic_id)}/17/00000000000000001234-"
                   f"{uuid_to_base64(md.remote_log_segment_id.id)}.log")
    parsed = parse_segment_key(key, "pre/")
    assert (parsed.topic, parsed.topic_id, parsed.partition, parsed.start_offset, parsed.segment_id, parsed.suffix) == (
        "orders.v1_x-y", tp.topic_id, 17, 1234, md.remote_log_segment_id.id, "log")
    assert parsed.topic_id_partition == tp
    assert set(segment_keys("", md)) == set(ALL_SUFFIXES)


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "ä", "x" * 250, "../etc"])
def test_invalid_topics_never_become_keys(topic):
    with pytest.raises(InvalidKeyError):
        validate_topic(topic)
    with pytest.raises(InvalidKeyError):
        segment_key("", metadata(topic=topic), "log")


@pytest.mark.parametrize("prefix", ["/abs/", "a/../b/", "./x", "a//b", "back\\slash", "sp ace", "nl\n", "a/./b"])
def test_invalid_prefixes(prefix):
    with pytest.raises(InvalidKeyError):
        validate_key_prefix(prefix)


@pytest.mark.parametrize("prefix", ["", "tiered/", "cluster-1-", "a/b/c/", "env=prod/"])
def test_valid_prefixes(prefix):
    assert validate_key_prefix(prefix) == prefix


def test_unknown_suffix_is_refused():
    with pytest.raises(InvalidKeyError):
        segment_key("", metadata(), "exe")


@pytest.mark.parametrize("key", [
    "other/t-jF8s79t9SrG_PNqlwv7bAA/0/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",  # outside the prefix
    "p/t-jF8s79t9SrG_PNqlwv7bAA/0/extra/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",
    "p/t-jF8s79t9SrG_PNqlwv7bAA/-1/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",
    "p/t-jF8s79t9SrG_PNqlwv7bAA/01/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",
    "p/t-jF8s79t9SrG_PNqlwv7bAA/0/0000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",
    "p/t-jF8s79t9SrG_PNqlwv7bAA/0/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log.tmp",
    "p/t-jF8s79t9SrG_PNqlwv7bAA/99999999999/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",
    "p/..-jF8s79t9SrG_PNqlwv7bAA/0/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",
    "p/t-jF8s79t9SrG_PNqlwv7bAB/0/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log",
])
def test_foreign_keys_do_not_parse(key):
    with pytest.raises(InvalidKeyError):
        parse_segment_key(key, "p/")


def test_a_listing_skips_the_partition_objects_quietly_and_warns_of_foreign_keys(caplog):
    seg = "p/t-jF8s79t9SrG_PNqlwv7bAA/0/00000000000000000000-jF8s79t9SrG_PNqlwv7bAA.log"
    listed = [seg, "p/t-jF8s79t9SrG_PNqlwv7bAA/0/log-start-offset.json",
              "p/t-jF8s79t9SrG_PNqlwv7bAA/0/cleaner-offset-checkpoint.json", "p/t-jF8s79t9SrG_PNqlwv7bAA/0/x.bin"]
    with caplog.at_level("WARNING", logger="tieredlog.rsm.keys"):
        assert [k.key for k in parse_listing(listed, "p/")] == [seg]
    assert [r.getMessage() for r in caplog.records if "not a tieredlog segment key" in r.getMessage()] == [
        "ignoring object that is not a tieredlog segment key: key 'p/t-jF8s79t9SrG_PNqlwv7bAA/0/x.bin' does not "
        "follow the segment key layout"]
