"""AsyncKafkaConnection: pipelined requests against a real broker, and against scripted peers on
127.0.0.1 the ways a connection fails (dropped, oversized frame, stray correlation id, timeout)."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponse
from scripted_broker import Peer, ScriptedBroker, metadata_request, run

from tieredlog.clients.connection import AsyncKafkaConnection, InvalidReceive
from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.protocol.api import API_VERSIONS, CORE_VERSIONS, LEADER_AND_ISR, METADATA
from tieredlog.protocol.codec import RequestHeader

SOFTWARE = {"client_software_name": "tieredlog-tests", "client_software_version": "1"}


def _nodelay(conn: AsyncKafkaConnection) -> bool:
    sock = conn._writer.get_extra_info("socket")
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# --- against a real broker ---------------------------------------------------------------------------

def test_pipelined_metadata_and_api_versions_against_a_broker(broker):
    async def main() -> None:
        conn = await AsyncKafkaConnection.open("127.0.0.1", broker.port, client_id="it", timeout_s=20)
        try:
            assert _nodelay(conn)
            assert conn.versions[METADATA] == CORE_VERSIONS[METADATA]
            assert conn.version_for(METADATA) == CORE_VERSIONS[METADATA][1]
            topics = [f"absent-{i}" for i in range(12)]
            calls = []
            for i, t in enumerate(topics):
                calls.append(conn.request(METADATA, metadata_request(t)))
                if i % 3 == 0:
                    calls.append(conn.request(API_VERSIONS, SOFTWARE, version=3))
            answers = await asyncio.gather(*calls)
            metadata = [a for a in answers if isinstance(a, MetadataResponse)]
            versions = [a for a in answers if isinstance(a, ApiVersionsResponse)]
            assert len(metadata) == 12 and len(versions) == 4
            for t, md in zip(topics, metadata):
                assert [x.name for x in md.topics] == [t]  # each answer reached the request that asked it
                assert md.topics[0].error_code == ErrorCode.unknown_topic_or_partition
                assert [b.port for b in md.brokers] == [broker.port]
            for av in versions:
                assert av.error_code == ErrorCode.none
                assert METADATA in {k.api_key for k in av.api_keys}
            assert not conn.closed
        finally:
            await conn.close()
        assert conn.closed
        with pytest.raises(ConnectionError):
            await conn.request(METADATA, metadata_request("x"))

    run(main())


# --- against scripted peers ----------------------------------------------------------------------------

def test_requests_are_pipelined_and_matched_by_correlation_id():
    async def script(peer: Peer) -> None:
        await peer.handshake()
        pending = [await peer.read_request() for _ in range(5)]  # all five arrive before any answer
        for header, body in reversed(pending):
            await peer.answer(header, {"throttle_time": 0, "brokers": [], "controller_id": 1,
                                       "topics": [{"name": body.topics[0].name, "error_code": 0, "partitions": []}]})

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open()
            answers = await asyncio.gather(*(conn.request(METADATA, metadata_request(f"t{i}"), version=12) for i in range(5)))
            assert [a.topics[0].name for a in answers] == [f"t{i}" for i in range(5)]
            await conn.close()
            await sb.done

    run(main())


def test_a_peer_that_accepts_and_closes_fails_the_open():
    async def script(peer: Peer) -> None:
        return  # the listener closes the connection at once

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            with pytest.raises(ConnectionError):
                await sb.open()

    run(main())


def test_a_dropped_connection_fails_every_pending_request():
    async def script(peer: Peer) -> None:
        await peer.handshake()
        for _ in range(3):
            await peer.read_request()
        peer.writer.transport.abort()

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open()
            results = await asyncio.gather(*(conn.request(METADATA, metadata_request(f"t{i}")) for i in range(3)),
                                           return_exceptions=True)
            assert all(isinstance(r, ConnectionError) for r in results), results
            assert conn.closed
            with pytest.raises(ConnectionError):
                await conn.request(METADATA, metadata_request("after"))
            await conn.close()  # closing twice is harmless
            await sb.done

    run(main())


def test_a_frame_over_the_bound_fails_every_pending_request():
    async def script(peer: Peer) -> None:
        await peer.handshake()
        await peer.read_request()
        await peer.read_request()
        peer.writer.write(struct.pack(">i", 1 << 30) + b"\0" * 64)
        await peer.writer.drain()
        assert await peer.closed_by_client()

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open(max_frame_bytes=64 * 1024)
            results = await asyncio.gather(conn.request(METADATA, metadata_request("a")), conn.request(METADATA, metadata_request("b")),
                                           return_exceptions=True)
            assert all(isinstance(r, InvalidReceive) for r in results), results
            assert "1073741824" in str(results[0])
            assert conn.closed
            await sb.done

    run(main())


def test_a_response_to_no_request_closes_the_connection():
    async def script(peer: Peer) -> None:
        await peer.handshake()
        header, _ = await peer.read_request()
        stray = RequestHeader(header.api_key, header.api_version, header.correlation_id + 1000, None)
        await peer.answer(stray, {"throttle_time": 0, "brokers": [], "topics": []})
        assert await peer.closed_by_client()

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open()
            with pytest.raises(InvalidReceive, match="correlation id"):
                await conn.request(METADATA, metadata_request("a"))
            assert conn.closed
            await sb.done

    run(main())


def test_a_timeout_raises_closes_and_fails_the_others():
    async def script(peer: Peer) -> None:
        await peer.handshake()
        await peer.read_request()
        await peer.read_request()
        assert await peer.closed_by_client()  # never answered: the client gives up and hangs up

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open()
            slow = asyncio.ensure_future(conn.request(METADATA, metadata_request("slow"), timeout_s=30))
            with pytest.raises(asyncio.TimeoutError):
                await conn.request(METADATA, metadata_request("fast"), timeout_s=0.3)
            assert conn.closed
            with pytest.raises(ConnectionError):
                await slow
            await sb.done

    run(main())


def test_an_undecodable_response_fails_only_its_request():
    async def script(peer: Peer) -> None:
        await peer.handshake()
        first, _ = await peer.read_request()
        second, body = await peer.read_request()
        # the first answer claims a topics array of 100 entries it does not hold
        garbled = struct.pack(">i", first.correlation_id) + b"\x00" + struct.pack(">i", 0) + b"\x01" + b"\x00" * 5 + b"\x65"
        peer.writer.write(struct.pack(">i", len(garbled)) + garbled)
        await peer.answer(second, {"throttle_time": 0, "brokers": [], "topics": [
            {"name": body.topics[0].name, "error_code": 0, "partitions": []}]})
        header, _ = await peer.read_request()
        await peer.answer(header, {"throttle_time": 0, "brokers": [], "topics": []})

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open()
            bad, good = await asyncio.gather(conn.request(METADATA, metadata_request("a"), version=12),
                                             conn.request(METADATA, metadata_request("b"), version=12),
                                             return_exceptions=True)
            assert isinstance(bad, KafkaProtocolError), bad
            assert good.topics[0].name == "b"
            assert not conn.closed
            assert (await conn.request(METADATA, metadata_request("c"), version=12)).topics == ()
            await conn.close()
            await sb.done

    run(main())


def test_a_cancelled_request_leaves_the_connection_in_sync():
    async def script(peer: Peer) -> None:
        await peer.handshake()
        first, _ = await peer.read_request()
        second, body = await peer.read_request()
        await asyncio.sleep(0.2)  # the first caller has given up by now; its answer still comes first
        await peer.answer(first, {"throttle_time": 0, "brokers": [], "topics": [{"name": "first", "partitions": []}]})
        await peer.answer(second, {"throttle_time": 0, "brokers": [], "topics": [
            {"name": body.topics[0].name, "partitions": []}]})

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open()
            first = asyncio.ensure_future(conn.request(METADATA, metadata_request("first")))
            await asyncio.sleep(0.05)
            first.cancel()
            answer = await conn.request(METADATA, metadata_request("second"))
            assert first.cancelled()
            assert answer.topics[0].name == "second"
            assert not conn.closed
            await conn.close()
            await sb.done

    run(main())


def test_version_for_is_the_highest_version_both_sides_speak():
    async def script(peer: Peer) -> None:
        await peer.handshake({API_VERSIONS: (0, 3), METADATA: (1, 9), LEADER_AND_ISR: (0, 7)})
        assert await peer.closed_by_client()

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            conn = await sb.open()
            assert conn.version_for(METADATA) == 9
            assert conn.version_for(LEADER_AND_ISR) == 7  # our own schema: kio has none
            with pytest.raises(KafkaProtocolError):
                conn.version_for(43)  # not advertised
            await conn.close()
            await sb.done

    run(main())


def test_open_times_out_when_the_peer_never_answers_api_versions():
    async def script(peer: Peer) -> None:
        await peer.read_request()
        assert await peer.closed_by_client()

    async def main() -> None:
        async with ScriptedBroker(script) as sb:
            with pytest.raises(asyncio.TimeoutError):
                await sb.open(timeout_s=0.3)
            await sb.done

    run(main())
