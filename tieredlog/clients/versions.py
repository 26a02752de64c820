"""Version negotiation and addresses: what both sides speak, and where the peer is."""

from __future__ import annotations

from tieredlog.protocol.schemas import load_request_schema


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """The first HOST:PORT of a bootstrap list (a ``LISTENER://`` prefix and IPv6 brackets allowed)."""
    return parse_bootstrap_list(bootstrap)[0]


def parse_bootstrap_list(bootstrap: str) -> list[tuple[str, int]]:
    """Every HOST:PORT of a ``bootstrap.servers`` list, in order."""
    out = []
    for item in bootstrap.split(","):
        address = item.strip()
        if "://" in address:
            address = address.split("://", 1)[1]
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {bootstrap!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


def format_address(endpoint: tuple[str, int]) -> str:
    """HOST:PORT, with an IPv6 host in brackets (what ``parse_bootstrap`` reads back)."""
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def highest_local_version(api_key: int, hi: int) -> int | None:
    """The highest version up to ``hi`` that kio (or our inter-broker schemas) can encode."""
    for v in range(hi, -1, -1):
        try:
            load_request_schema(api_key, v)
            return v
        except Exception:  # noqa: BLE001 - kio raises UnknownEntity for versions it lacks
            continue
    return None
