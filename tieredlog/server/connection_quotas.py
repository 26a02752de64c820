"""Connection limits, as Kafka's ConnectionQuotas: how many connections the broker, each listener and
each client address may hold.

- ``max.connections.per.ip`` (``max.connections.per.ip.overrides`` for some addresses): a connection
  over its address's limit is closed as soon as it is accepted, with one log line.
- ``max.connections`` (all listeners together but the inter-broker one, when there are several) and
  ``listener.name.<l>.max.connections`` (one listener; unset, ``max.connections``): while a limit is
  reached the listener's acceptor stops, holding the one connection it accepted, and the others wait
  in the kernel's backlog until a connection closes: nothing is refused, as in Kafka.

The three broker-level configs change live (dynamic broker configs): ``reconfigure`` is told the new
config and wakes a waiting acceptor. Everything here runs on the event loop and never blocks; host
names in the overrides are resolved on an executor.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections import Counter

from tieredlog.config import BrokerConfig, parse_ip_overrides

log = logging.getLogger(__name__)


def normalize_ip(host: str) -> str:
    """One spelling per address: an IPv4-mapped IPv6 peer counts as its IPv4 address."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _resolve(hosts: list[str]) -> dict[str, list[str]]:
    """Host names -> their addresses (blocking DNS: an executor's thread). A name that does not resolve
    is left out, with a warning, as Kafka's InetAddress.getByName would fail it."""
    out: dict[str, list[str]] = {}
    for host in hosts:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s (%s); its limit is not applied", host, exc)
            continue
        out[host] = sorted({normalize_ip(str(info[4][0])) for info in infos})
    return out


class ConnectionQuotas:
    def __init__(self, config: BrokerConfig, listener_names: list[str], inter_broker_listener: str) -> None:
        self.per_ip: Counter[str] = Counter()
        self.per_listener: Counter[str] = Counter({name: 0 for name in listener_names})
        self.total = 0
        # Kafka's protected listener: the brokers can reach each other whatever the clients hold
        self._protected = inter_broker_listener if len(listener_names) > 1 else None
        self._slot_freed: asyncio.Event | None = None
        # connections refused over a per-IP limit, and times an acceptor stopped at a broker or
        # listener limit, since start (what operators and tests read)
        self.rejected_per_ip = 0
        self.acceptor_blocked = 0
        self.reconfigure(config)

    # ---- configs ---------------------------------------------------------------------------------

    def reconfigure(self, config: BrokerConfig) -> None:
        """The limits of ``config``; a waiting acceptor re-checks them."""
        self.broker_max: int = config["max.connections"]
        self.listener_max = {name: int(config.listener_value(name, "max.connections")) for name in self.per_listener}
        self.default_per_ip: int = config["max.connections.per.ip"]
        overrides = parse_ip_overrides(config["max.connections.per.ip.overrides"])
        literal = {normalize_ip(h): n for h, n in overrides.items() if _is_ip(h)}
        self.per_ip_overrides: dict[str, int] = literal
        names = [h for h in overrides if not _is_ip(h)]
        if names:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                future = loop.run_in_executor(None, _resolve, names)
                future.add_done_callback(lambda f: self._resolved(literal, overrides, f))
        self._wake()

    def _resolved(self, literal: dict[str, int], overrides: dict[str, int], future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None or self.per_ip_overrides is not literal:
            return  # reconfigured again meanwhile: that one is in force
        merged = dict(literal)
        for host, addresses in future.result().items():
            for address in addresses:
                merged.setdefault(address, overrides[host])
        self.per_ip_overrides = merged

    def max_for_ip(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.default_per_ip)

    # ---- accepting -------------------------------------------------------------------------------

    def slot_available(self, listener: str) -> bool:
        if self.per_listener[listener] >= self.listener_max.get(listener, self.broker_max):
            return False
        return listener == self._protected or self.total < self.broker_max

    async def wait_for_slot(self, listener: str) -> None:
        """Until ``listener`` may take one more connection (the acceptor waits here, its accepted
        connection held), with one log line when it has to wait."""
        if self.slot_available(listener):
            return
        self.acceptor_blocked += 1
        log.info("listener %s holds %d connection(s), the broker %d: max.connections reached (%s), accepting again "
                 "once a connection closes", listener, self.per_listener[listener], self.total,
                 self.listener_max.get(listener, self.broker_max))
        while not self.slot_available(listener):
            if self._slot_freed is None:
                self._slot_freed = asyncio.Event()
            await self._slot_freed.wait()

    def inc(self, listener: str, ip: str) -> bool:
        """Count a connection accepted on ``listener`` from ``ip`` (after ``wait_for_slot``); False
        when ``ip`` already holds its limit: the caller closes it (not counted)."""
        limit = self.max_for_ip(ip)
        held = self.per_ip[ip]
        if held >= limit:
            self.rejected_per_ip += 1
            log.info("Rejected connection from %s, address already has the configured maximum of %d connections.",
                     ip, limit)
            return False
        self.per_ip[ip] = held + 1
        self.per_listener[listener] += 1
        self.total += 1
        return True

    def dec(self, listener: str, ip: str) -> None:
        held = self.per_ip[ip] - 1
        if held > 0:
            self.per_ip[ip] = held
        else:
            del self.per_ip[ip]
        self.per_listener[listener] -= 1
        self.total -= 1
        self._wake()

    def _wake(self) -> None:
        if self._slot_freed is not None:
            self._slot_freed.set()
            self._slot_freed = None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
