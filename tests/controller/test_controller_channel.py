"""The controller's channel against a tiny Kafka-speaking TCP server on 127.0.0.1 that records the
request frames it receives: requests reach the broker's inter-broker endpoint in order, responses
reach the callbacks, and a broker that leaves has its pending requests dropped."""

from __future__ import annotations

import socket
import struct
import threading
from concurrent.futures import Future
from typing import Any, Iterator

import pytest
from helpers import free_port

from tieredlog.clients.routing import inter_broker_endpoint
from tieredlog.cluster.znodes import BrokerInfo, EndPoint
from tieredlog.controller.channel import ChannelClosedError, ControllerChannelManager
from tieredlog.controller.request_batch import UPDATE_METADATA, UPDATE_METADATA_VERSION
from tieredlog.protocol.api import API_VERSIONS
from tieredlog.protocol.codec import decode_request, encode_response


class RecordingBroker:
    """Answers ApiVersions and UpdateMetadata; records every request it decodes."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[tuple[int, Any]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                header, body = decode_request(conn.recv(size, socket.MSG_WAITALL))
                self.requests.append((header.api_key, body))
                if header.api_key == API_VERSIONS:
                    answer: dict[str, Any] = {"error_code": 0, "api_keys": [
                        {"api_key": API_VERSIONS, "min_version": 0, "max_version": 3},
                        {"api_key": UPDATE_METADATA, "min_version": 8, "max_version": 8}]}
                else:
                    answer = {"error_code": 0}
                conn.sendall(encode_response(header.api_key, header.api_version, header.correlation_id, answer))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def broker() -> Iterator[RecordingBroker]:
    b = RecordingBroker()
    try:
        yield b
    finally:
        b.close()


def body(epoch: int) -> dict[str, Any]:
    return {"controller_id": 0, "controller_epoch": epoch, "broker_epoch": 7, "topic_states": [],
            "live_brokers": [{"id": 1, "endpoints": [{"port": 1, "host": "h", "listener": "PLAINTEXT",
                                                      "security_protocol": 0}], "rack": None}]}


def test_inter_broker_endpoint_choice() -> None:
    info = BrokerInfo(1, (EndPoint("CLIENT", "c", 1, "SSL"), EndPoint("REPLICATION", "r", 2, "PLAINTEXT")))
    assert inter_broker_endpoint(info, "replication", "PLAINTEXT") == info.endpoints[1]
    assert inter_broker_endpoint(info, None, "PLAINTEXT") == info.endpoints[1]
    assert inter_broker_endpoint(info, None, "SSL") == info.endpoints[0]
    assert inter_broker_endpoint(info, "OTHER", "PLAINTEXT") is None


def test_requests_arrive_in_order_and_answers_reach_the_callbacks(broker: RecordingBroker) -> None:
    channel = ControllerChannelManager(0, socket_timeout_ms=5000)
    try:
        channel.startup({1: BrokerInfo(1, (EndPoint("PLAINTEXT", "127.0.0.1", broker.port),))})
        answers: list[Future[Any]] = [Future() for _ in range(3)]
        for epoch, fut in enumerate(answers, start=1):
            channel.send_request(1, UPDATE_METADATA, UPDATE_METADATA_VERSION, body(epoch),
                                 lambda response, error, fut=fut: fut.set_result((response, error)))
        for fut in answers:
            response, error = fut.result(timeout=30)
            assert error is None and response.error_code.value == 0
        sent = [b for key, b in broker.requests if key == UPDATE_METADATA]
        assert [b.controller_epoch for b in sent] == [1, 2, 3]
        assert sent[0].broker_epoch == 7 and sent[0].live_brokers[0].endpoints[0].host == "h"
    finally:
        channel.shutdown()


def test_a_request_to_a_broker_that_leaves_is_dropped() -> None:
    port = free_port()  # nobody listens: the sender keeps reconnecting while the broker is live
    channel = ControllerChannelManager(0, socket_timeout_ms=5000)
    try:
        channel.add_broker(BrokerInfo(2, (EndPoint("PLAINTEXT", "127.0.0.1", port),)))
        done: Future[Any] = Future()
        channel.send_request(2, UPDATE_METADATA, UPDATE_METADATA_VERSION, body(1),
                             lambda response, error: done.set_result((response, error)))
        assert not done.done()
        channel.remove_broker(2)
        response, error = done.result(timeout=30)
        assert response is None and isinstance(error, ChannelClosedError)
        gone: Future[Any] = Future()
        channel.send_request(2, UPDATE_METADATA, UPDATE_METADATA_VERSION, body(2),
                             lambda response, error: gone.set_result(error))
        assert isinstance(gone.result(timeout=30), ChannelClosedError)
    finally:
        channel.shutdown()
