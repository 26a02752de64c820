"""The client layer's per-node connections against a scripted peer on 127.0.0.1: reconnecting after
a failure, a node without an endpoint, a blocking request cut by ``close`` from another thread."""

from __future__ import annotations

import asyncio
import threading

import pytest
from scripted_broker import Peer, ScriptedBroker, metadata_request, run

from tieredlog.clients.node_clients import BlockingNodeConnection, ConnectSettings, NodeConnections
from tieredlog.clients.retry import ExponentialBackoff, retry_until
from tieredlog.protocol.api import METADATA


def test_a_failed_connection_is_dropped_and_the_next_request_opens_another() -> None:
    accepted = 0

    async def script(peer: Peer) -> None:
        nonlocal accepted
        accepted += 1
        await peer.handshake()
        header, _ = await peer.read_request()
        if accepted == 1:
            return  # the first connection closes without answering
        await peer.answer(header, {"brokers": [], "topics": []})

    async def main() -> None:
        async with ScriptedBroker(script) as broker:
            nodes: NodeConnections[int] = NodeConnections(
                lambda n: ("127.0.0.1", broker.port) if n == 1 else None,
                lambda: ConnectSettings("test", 10.0), describe=lambda n: f"broker {n}")
            with pytest.raises(ConnectionError):
                await nodes.request(1, METADATA, metadata_request("t"), version=12)
            answer = await nodes.request(1, METADATA, metadata_request("t"), version=12)
            assert list(answer.brokers) == [] and accepted == 2
            with pytest.raises(ConnectionError, match="broker 7 has no known endpoint"):
                await nodes.get(7)
            await nodes.close()

    run(main())


def test_close_from_another_thread_fails_a_blocking_request_in_flight() -> None:
    ready = threading.Event()
    asked = threading.Event()
    port: list[int] = []
    stop: list[asyncio.Future[None]] = []

    async def script(peer: Peer) -> None:
        await peer.handshake()
        await peer.read_request()
        asked.set()
        await peer.closed_by_client()  # never answers

    async def serve() -> None:
        async with ScriptedBroker(script) as broker:
            port.append(broker.port)
            stop.append(asyncio.get_running_loop().create_future())
            ready.set()
            await stop[0]

    loop = asyncio.new_event_loop()
    server = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    server.start()
    try:
        assert ready.wait(30)
        conn = BlockingNodeConnection(("127.0.0.1", port[0]), client_id="test")
        closer = threading.Thread(target=lambda: asked.wait(30) and conn.close())
        closer.start()
        # the timeout is far away: the error comes from the close, not from waiting it out
        with pytest.raises(OSError) as failed:
            conn.request(METADATA, metadata_request("t"), 12, timeout_s=120)
        assert not isinstance(failed.value, TimeoutError)
        closer.join()
        with pytest.raises(ConnectionError, match="is closed"):
            conn.request(METADATA, metadata_request("t"), 12, timeout_s=5)
    finally:
        if stop:
            loop.call_soon_threadsafe(stop[0].set_result, None)
        server.join(30)
        loop.close()


def test_backoff_doubles_to_its_bound_and_starts_again_after_a_success() -> None:
    backoff = ExponentialBackoff(0.1, 0.5)
    assert [backoff.failed() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    backoff.reset()
    assert backoff.failed() == 0.1


def test_retry_until_asks_again_on_a_retriable_error_and_raises_any_other_at_once() -> None:
    calls: list[str] = []

    def flaky() -> str:
        calls.append("try")
        if len(calls) < 3:
            raise TimeoutError("not yet")
        return "answer"

    assert retry_until(flaky, timeout_s=30, backoff_s=0, retriable=lambda e: isinstance(e, TimeoutError)) == "answer"
    assert len(calls) == 3

    calls.clear()
    with pytest.raises(ValueError):
        retry_until(lambda: calls.append("try") or int("x"), timeout_s=30, backoff_s=0,
                    retriable=lambda e: isinstance(e, TimeoutError))
    assert len(calls) == 1

    calls.clear()

    def never() -> str:
        calls.append("try")
        raise TimeoutError(f"attempt {len(calls)}")

    with pytest.raises(TimeoutError):  # the deadline has passed: the last error, after one more try
        retry_until(never, timeout_s=0, backoff_s=0, retriable=lambda e: True)
    assert len(calls) == 1
