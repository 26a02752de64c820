"""ConnectionQuotas alone (one class): Kafka's broker-wide, per-listener and per-address limits, the
inter-broker listener exempt from the broker-wide one, and acceptors woken by a closed connection or
a raised limit."""

from __future__ import annotations

import asyncio

import pytest

from tieredlog.config import BrokerConfig, BrokerConfigError, parse_ip_overrides
from tieredlog.server.connection_quotas import ConnectionQuotas, normalize_ip

LISTENERS = "PLAINTEXT://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093"


def _config(**props: str) -> BrokerConfig:
    return BrokerConfig.from_props({"listeners": LISTENERS, "listener.security.protocol.map":
                                    "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT", **props}, warn=False)


def _quotas(cfg: BrokerConfig) -> ConnectionQuotas:
    return ConnectionQuotas(cfg, ["PLAINTEXT", "EXTERNAL"], cfg.inter_broker_listener[0])


def test_per_ip_limits_and_overrides() -> None:
    q = _quotas(_config(**{"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "10.0.0.9:0,::1:3"}))
    assert q.inc("EXTERNAL", "10.0.0.1") and q.inc("EXTERNAL", "10.0.0.1")
    assert not q.inc("EXTERNAL", "10.0.0.1")
    assert not q.inc("EXTERNAL", "10.0.0.9")
    assert all(q.inc("PLAINTEXT", "::1") for _ in range(3)) and not q.inc("PLAINTEXT", "::1")
    assert (q.total, q.rejected_per_ip) == (5, 3)
    q.dec("EXTERNAL", "10.0.0.1")
    assert q.inc("EXTERNAL", "10.0.0.1")
    assert normalize_ip("::ffff:10.0.0.1") == "10.0.0.1"


def test_broker_limit_exempts_the_inter_broker_listener_and_wakes_acceptors() -> None:
    async def run() -> None:
        cfg = _config(**{"max.connections": "2"})
        q = _quotas(cfg)
        for ip in ("10.0.0.1", "10.0.0.2"):
            await q.wait_for_slot("EXTERNAL")
            assert q.inc("EXTERNAL", ip)
        assert not q.slot_available("EXTERNAL")
        assert q.slot_available("PLAINTEXT")  # the inter-broker listener: outside the broker-wide count
        waiting = asyncio.ensure_future(q.wait_for_slot("EXTERNAL"))
        await asyncio.sleep(0)
        assert not waiting.done() and q.acceptor_blocked == 1
        q.dec("EXTERNAL", "10.0.0.1")
        await asyncio.wait_for(waiting, 5)
        q.inc("EXTERNAL", "10.0.0.3")
        waiting = asyncio.ensure_future(q.wait_for_slot("EXTERNAL"))
        await asyncio.sleep(0)
        assert not waiting.done()
        q.reconfigure(_config(**{"max.connections": "3"}))  # a dynamic change wakes it
        await asyncio.wait_for(waiting, 5)
        # the inter-broker listener has its own limit only: max.connections, unless its listener's is set
        q.reconfigure(_config(**{"max.connections": "2"}))
        assert q.inc("PLAINTEXT", "10.0.0.8") and q.inc("PLAINTEXT", "10.0.0.8")
        assert not q.slot_available("PLAINTEXT") and not q.slot_available("EXTERNAL")
        q.reconfigure(_config(**{"max.connections": "2", "listener.name.plaintext.max.connections": "5"}))
        assert q.slot_available("PLAINTEXT") and not q.slot_available("EXTERNAL")

    asyncio.run(run())


def test_config_checks() -> None:
    assert parse_ip_overrides("host1:10, 127.0.0.1:200,::1:4") == {"host1": 10, "127.0.0.1": 200, "::1": 4}
    with pytest.raises(BrokerConfigError, match="max.connections.per.ip.overrides"):
        _config(**{"max.connections.per.ip.overrides": "host1"})
    with pytest.raises(BrokerConfigError, match="max.connections.per.ip can be set to zero only if"):
        _config(**{"max.connections.per.ip": "0"})
    assert _config(**{"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:4"})
