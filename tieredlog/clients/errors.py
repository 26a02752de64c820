"""Errors of the client layer that are not plain connection failures."""

from __future__ import annotations


class KafkaProtocolError(Exception):
    """The peer's answer cannot be used: no common version, a failed ApiVersions, a response that
    does not decode or answers another request."""


class InvalidReceive(ConnectionError):
    """A frame the connection cannot accept (too large, or answering no request): it is closed."""
