"""Kafka's KafkaPrincipal: the identity a connection acts as, ``User:<name>``.

A PLAINTEXT connection, and a TLS one without a client certificate, is ``User:ANONYMOUS``; SASL
sets the authenticated user's name; mutual TLS the certificate subject after
``ssl.principal.mapping.rules``. The authorizer matches ACLs on it.
"""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """``User:alice`` (Kafka's form in ACLs and super.users); ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is <type>:<name>, like User:alice, not {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``)."""
    out = set()
    for item in (value or "").split(";"):
        item = item.strip()
        if item:
            out.add(str(KafkaPrincipal.parse(item)))
    return frozenset(out)
