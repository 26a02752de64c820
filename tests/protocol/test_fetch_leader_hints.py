"""KIP-951 leader hints in hand-encoded Fetch responses: the CurrentLeader tagged field (v12+) and the
NodeEndpoints tagged field (v16) decode with kio's generated FetchResponse reader as Kafka writes them."""

from __future__ import annotations

import uuid

import pytest

from tieredlog.protocol.codec import decode_response
from tieredlog.protocol.fetch_encoder import FetchPartitionData, FetchTopicData, encode_fetch_response

FETCH = 1


def _decode(version: int, parts: list) -> object:
    frame = b"".join(bytes(p) for p in parts)
    _cid, body = decode_response(FETCH, version, frame[4:])
    return body


@pytest.mark.parametrize("version", [12, 13, 15, 16])
def test_current_leader_and_node_endpoints_decode(version: int) -> None:
    tid = uuid.uuid4()
    moved = FetchPartitionData(0, error_code=6, current_leader=(3, 7))
    fine = FetchPartitionData(1, high_watermark=5, records=b"")
    parts, size = encode_fetch_response(version, 42, [FetchTopicData("t", tid, [moved, fine])],
                                        node_endpoints=[(3, "127.0.0.1", 9094, "r1")])
    assert size == sum(len(bytes(p)) for p in parts)
    body = _decode(version, parts)
    (topic,) = body.responses  # type: ignore[attr-defined]
    p0, p1 = topic.partitions
    assert (p0.error_code.value, p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (6, 3, 7)
    assert (p1.current_leader.leader_id, p1.current_leader.leader_epoch) == (-1, -1)  # absent: the default
    assert p1.high_watermark == 5
    if version >= 16:
        (ep,) = body.node_endpoints  # type: ignore[attr-defined]
        assert (ep.node_id, ep.host, ep.port, ep.rack) == (3, "127.0.0.1", 9094, "r1")
