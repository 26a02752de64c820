"""The deep fuzz run (``make fuzz``, never part of ``make test``): hypothesis builds structurally
valid requests of every schema the broker advertises (nulls, empty and odd values included) and
sends each to a real broker. Every one must be answered, or closed where Kafka closes the
connection, without a handler raising and without the broker process ending.

``TIEREDLOG_FUZZ_EXAMPLES`` sets the examples per (API, version) (default 60).
"""

from __future__ import annotations

import io
import os

import pytest
from frame_fuzz import advertised, probe
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from tieredlog.protocol.api import PRODUCE, PRODUCE_REJECTED_BELOW
from tieredlog.protocol.codec import _request_codec

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("TIEREDLOG_FUZZ_EXAMPLES", "60"))

st.register_type_strategy(Records, st.binary(max_size=256).map(Records))


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    from broker_harness import BrokerProcess

    # a topic to hit by name: hypothesis's short names find it now and then
    b = BrokerProcess(tmp_path_factory.mktemp("deep") / "data", {"num.partitions": "2"}).start()
    try:
        yield b
    finally:
        b.stop()


def _frame(api_key: int, version: int, body) -> bytes:
    cls = _request_codec(api_key, version)[0]
    hdr = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(hdr)(buf, hdr(request_api_key=api_key, request_api_version=version, correlation_id=5, client_id="deep"))
    entity_writer(cls)(buf, body)
    payload = buf.getvalue()
    return len(payload).to_bytes(4, "big") + payload


def test_every_valid_request_is_served(fuzz_broker):
    b = fuzz_broker
    targets = [
        (k, v) for k, v in advertised(b.bootstrap) if not (k == PRODUCE and v < PRODUCE_REJECTED_BELOW)
    ]
    failures: list[str] = []
    for api_key, version in targets:
        cls = _request_codec(api_key, version)[0]

        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate])  # no shrinking: the first failing request is reported as it is
        @given(st.from_type(cls))
        # one() runs to the end below, before the loop moves on: api_key and version are the current ones.
        def one(body) -> None:
            try:
                frame = _frame(api_key, version, body)  # noqa: B023
            except (ValueError, OverflowError, TypeError):
                assume(False)  # a value kio cannot write (e.g. an out-of-range timedelta)
            with open(b.log_path, "rb") as f:
                start = f.seek(0, 2)
            outcome = probe(b.host, b.port, frame, wait=1.0)
            assert b.alive(), f"api {api_key} v{version} {frame.hex()} ended the broker"  # noqa: B023
            with open(b.log_path, "rb") as f:
                f.seek(start)
                log = f.read().decode(errors="replace")
            assert "Traceback" not in log, f"api {api_key} v{version}: {body!r}\n{log[-3000:]}"  # noqa: B023
            # Kafka closes the connection only for acks=0 produce errors; everything else is answered
            if outcome == "closed" and not (api_key == PRODUCE and getattr(body, "acks", 1) == 0):  # noqa: B023
                raise AssertionError(f"api {api_key} v{version} closed the connection: {body!r}\n{log[-2000:]}")  # noqa: B023

        try:
            one()
        except AssertionError as exc:
            failures.append(str(exc)[:3000])
    assert not failures, "\n\n".join(failures[:10])
