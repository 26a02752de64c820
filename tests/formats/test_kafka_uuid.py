import uuid

import pytest

from tieredlog.kafka_uuid import kafka_str_to_uuid, uuid_to_kafka_str
from tieredlog.log.checkpoints import PartitionMetadataFile
from tieredlog.rlm import pending_deletes
from tieredlog.rsm import keys, local


def test_kafka_uuid_strings():
    u = uuid.UUID("f1a6b4d2-7c3e-4b8a-9d0f-1234567890ab")
    s = uuid_to_kafka_str(u)
    assert len(s) == 22 and "=" not in s
    assert kafka_str_to_uuid(s) == u
    # Known values: Kafka's Uuid.ZERO_UUID, and the ops.html example topic id.
    assert uuid_to_kafka_str(uuid.UUID(int=0)) == "A" * 22
    assert kafka_str_to_uuid("jF8s79t9SrG_PNqlwv7bAA") == uuid.UUID("8c5f2cef-db7d-4ab1-bf3c-daa5c2fedb00")
    # 0xfb 0xff ... uses the URL-safe alphabet ('-' and '_'), never '+' or '/'.
    odd = uuid.UUID(bytes=bytes([0xFB, 0xFF] * 8))
    assert uuid_to_kafka_str(odd).startswith("-_")


@pytest.mark.parametrize("bad", ["", "short", "A" * 23, "+" * 22, "A" * 21 + "=", "jF8s79t9SrG/PNqlwv7bAA",
                                 "jF8s79t9SrG_PNqlwv7bAB", None])
def test_anything_kafka_would_not_write_is_refused(bad):
    # "...bAB" differs from "...bAA" only in the spare bits: the same uuid under a second name
    with pytest.raises(ValueError, match="Kafka uuid"):
        kafka_str_to_uuid(bad)


def test_every_user_shares_the_one_implementation(tmp_path):
    u = uuid.uuid4()
    text = uuid_to_kafka_str(u)
    assert keys.uuid_to_base64(u) == local.uuid_to_base64(u) == text
    assert keys.uuid_from_base64(text) == u
    with pytest.raises(keys.InvalidKeyError):
        keys.uuid_from_base64(text[:-1] + "B")
    meta = PartitionMetadataFile(tmp_path / "partition.metadata")
    meta.write(u)
    assert meta.path.read_text().endswith(f"topic_id: {text}\n") and meta.read() == u
    journal = pending_deletes.PendingDeleteJournal(tmp_path)
    tip = keys.TopicIdPartition(u, "t", 3)
    journal.add(tip)
    assert journal.path.read_text() == f"{text} 3 t\n" and journal.read() == [tip]
