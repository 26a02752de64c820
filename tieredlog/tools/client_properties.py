"""The client properties the console tools take as Kafka's do: ``--producer.config FILE`` /
``--consumer.config FILE`` and repeated ``--producer-property k=v`` / ``--consumer-property k=v`` (the
later wins), plus ``--command-config FILE`` as every tieredlog tool takes it. The security keys among
them (``security.protocol``, ``sasl.*``, ``ssl.*``) make the connections' ClientSettings.
"""

from __future__ import annotations

import argparse

from tieredlog.config import read_properties
from tieredlog.tools.command_config import ClientSettings, CommandConfigError


def key_values(items: list[str] | None, what: str) -> dict[str, str]:
    """``k=v`` items (each may itself hold several, comma-free, as ``--property`` does not split)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandConfigError(f"Invalid {what} {item!r}: expected key=value")
        out[key.strip()] = value
    return out


def merged(parser: argparse.ArgumentParser, files: list[str | None], items: list[str] | None,
           what: str) -> dict[str, str]:
    """The properties of ``files`` (in order, the later wins) then of ``items``; a file that cannot be
    read or an item without ``=`` ends the tool as a usage error."""
    props: dict[str, str] = {}
    try:
        for path in files:
            if path:
                try:
                    props.update(read_properties(path))
                except OSError as exc:
                    raise CommandConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
        props.update(key_values(items, what))
    except CommandConfigError as exc:
        parser.error(str(exc))
    return props


def settings(parser: argparse.ArgumentParser, props: dict[str, str]) -> ClientSettings:
    try:
        return ClientSettings(props)
    except CommandConfigError as exc:
        parser.error(str(exc))
        raise  # parser.error exits
