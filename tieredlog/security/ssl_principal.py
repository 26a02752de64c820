"""The principal of a mutual-TLS connection, as Kafka builds it.

A client certificate's subject becomes ``User:<name>``: its distinguished name in the form Java's
``X500Principal.getName()`` gives (RFC 2253: the last RDN first, ``CN=alice,OU=eng,O=acme``), then
mapped by ``ssl.principal.mapping.rules``. ACLs written for Kafka name these principals, so both steps
follow Java and Kafka to the character:

- the DN: only CN, C, L, ST, O, OU, STREET, DC and UID are named by keyword, any other attribute by its
  dotted OID with its value as ``#`` and the hex of its DER encoding (an emailAddress reads
  ``1.2.840.113549.1.9.1=#16...``); ``, = + < > # ; " \\`` in a value are escaped with a backslash, as
  are its leading and trailing blanks;
- the rules: ``DEFAULT`` (the DN as it is) or ``RULE:pattern/replacement/[L|U]``, separated by commas
  (newlines too); the first rule whose pattern matches the whole DN gives the name, its replacement
  written as Java writes one (``$1`` a group, ``\\`` escapes); a DN no rule matches fails the
  authentication.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

DEFAULT_RULES = "DEFAULT"


class InvalidMappingRule(ValueError):
    """``ssl.principal.mapping.rules`` does not parse."""


class NoMatchingRule(Exception):
    """No rule maps the DN: the connection is not authenticated (Kafka closes it)."""


# ---- the subject DN ----------------------------------------------------------------------------------

# the attribute types Java names by keyword in RFC 2253 form (every other one is a dotted OID)
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# value types Java writes as text: PrintableString, T61String, IA5String, GeneralString, BMPString, UTF8String
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_ESCAPED = frozenset(',=+<>#;"\\')


class _Der:
    """Just enough of a DER reader to walk to a certificate's subject."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def tlv(self, pos: int) -> tuple[int, int, int]:
        """(tag, start of the value, end of the value) of the element at ``pos``."""
        data = self.data
        tag = data[pos]
        length = data[pos + 1]
        start = pos + 2
        if length & 0x80:
            count = length & 0x7F
            if count == 0 or count > 4:
                raise ValueError("unsupported DER length")
            length = int.from_bytes(data[start : start + count], "big")
            start += count
        end = start + length
        if end > len(data):
            raise ValueError("DER element runs past the end")
        return tag, start, end

    def children(self, start: int, end: int) -> list[tuple[int, int, int, int]]:
        """(tag, element start, value start, value end) of each element in ``[start, end)``."""
        out = []
        pos = start
        while pos < end:
            tag, vstart, vend = self.tlv(pos)
            out.append((tag, pos, vstart, vend))
            pos = vend
        return out


def _oid(data: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for b in data:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in [first, arcs[0] - 40 * first, *arcs[1:]])


def _escape_value(text: str) -> str:
    body = "".join("\\" + ch if ch in _ESCAPED else "\\00" if ch == "\0" else ch for ch in text)
    # and, as Java, each leading and trailing blank (space or carriage return)
    core = body.strip(" \r")
    if not core:
        return "".join("\\" + ch for ch in body)
    lead = body.index(core)
    tail = body[lead + len(core):]
    return "".join("\\" + ch for ch in body[:lead]) + core + "".join("\\" + ch for ch in tail)


def subject_dn(certificate_der: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` writes it."""
    der = _Der(certificate_der)
    _, cert_start, cert_end = der.tlv(0)
    tbs_tag, _, tbs_start, tbs_end = der.children(cert_start, cert_end)[0]
    fields = der.children(tbs_start, tbs_end)
    if fields and fields[0][0] == 0xA0:  # [0] version, absent in a v1 certificate
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    tag, _, name_start, name_end = fields[4]
    if tbs_tag != 0x30 or tag != 0x30:
        raise ValueError("not an X.509 certificate")
    rdns = []
    for _, _, set_start, set_end in der.children(name_start, name_end):
        avas = []
        for _, _, ava_start, ava_end in der.children(set_start, set_end):
            (oid_tag, _, oid_start, oid_end), (value_tag, value_pos, value_start, value_end) = \
                der.children(ava_start, ava_end)[:2]
            oid = _oid(der.data[oid_start:oid_end])
            keyword = _RFC2253_KEYWORDS.get(oid)
            if keyword is None or value_tag not in _STRING_TAGS:
                avas.append(f"{keyword or oid}=#{der.data[value_pos:value_end].hex()}")
            else:
                # Java reads the value's bytes as UTF-8 whatever its string type
                text = der.data[value_start:value_end].decode("utf-8", errors="replace")
                avas.append(f"{keyword}={_escape_value(text)}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


# ---- the mapping rules --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Rule:
    text: str
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L" | "U" | ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # Java's replaceAll over the whole DN (a pattern that can match empty text matches again at the end)
        name = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name


def _java_replacement(replacement: str, groups: int) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement doing what Java's ``Matcher.replaceAll`` does with ``replacement``:
    ``\\x`` is x, ``$n`` group n (more digits while such a group exists), ``${name}`` a named group.
    As in Kafka, ``$n`` naming no group is literal text when the pattern has groups."""
    parts: list[tuple[bool, str | int]] = []  # (a group?, the text or the group)
    literal: list[str] = []

    def flush() -> None:
        if literal:
            parts.append((False, "".join(literal)))
            literal.clear()

    i, n = 0, len(replacement)
    while i < n:
        ch = replacement[i]
        if ch == "\\":
            if i + 1 == n:
                raise InvalidMappingRule(f"character to be escaped is missing in replacement {replacement!r}")
            literal.append(replacement[i + 1])
            i += 2
        elif ch != "$":
            literal.append(ch)
            i += 1
        elif i + 1 < n and replacement[i + 1] == "{":
            close = replacement.find("}", i + 2)
            if close < 0:
                raise InvalidMappingRule(f"named capturing group is missing trailing '}}' in {replacement!r}")
            flush()
            parts.append((True, replacement[i + 2 : close]))
            i = close + 1
        else:
            j = i + 1
            if j == n or not replacement[j].isdigit():
                raise InvalidMappingRule(f"Illegal group reference in replacement {replacement!r}")
            ref = int(replacement[j])
            if ref > groups:
                if groups == 0:
                    raise InvalidMappingRule(f"No group {ref} in replacement {replacement!r}")
                literal.append("$")  # Kafka makes a reference to a group the pattern lacks text
                i += 1
                continue
            j += 1
            while j < n and replacement[j].isdigit() and ref * 10 + int(replacement[j]) <= groups:
                ref = ref * 10 + int(replacement[j])
                j += 1
            flush()
            parts.append((True, ref))
            i = j
    flush()

    def expand(m: re.Match[str]) -> str:
        return "".join((m.group(p) or "") if is_group else str(p) for is_group, p in parts)

    return expand


def _java_pattern(pattern: str) -> re.Pattern[str]:
    # Java spells a named group (?<name>...), Python (?P<name>...)
    text = re.sub(r"\(\?<(?=[A-Za-z])", "(?P<", pattern)
    try:
        return re.compile(text)
    except re.error as exc:
        raise InvalidMappingRule(f"Invalid rule pattern {pattern!r}: {exc}") from None


def _read_part(text: str, pos: int) -> int:
    """The end of a pattern or replacement starting at ``pos``: the next ``/`` no backslash escapes
    (-1 when there is none)."""
    while pos < len(text) and text[pos] != "/":
        pos += 2 if text[pos] == "\\" else 1
    return pos if pos < len(text) else -1


def _separator(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] not in ",\n":
        pos += 1
    return pos


def parse_rules(rules: str | None) -> list[_Rule]:
    """The rules of ``ssl.principal.mapping.rules`` in order; InvalidMappingRule names the one at fault."""
    text = (DEFAULT_RULES if rules is None else rules).strip()
    out: list[_Rule] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1  # empty rules are skipped, as Kafka does
        if pos >= len(text):
            return out
        start = pos
        rule: _Rule | None = None
        if text.startswith("DEFAULT", pos):
            rule = _Rule("DEFAULT", None)
            pos += len("DEFAULT")
        elif text.startswith("RULE:", pos):
            pattern_end = _read_part(text, pos + len("RULE:"))
            replacement_end = _read_part(text, pattern_end + 1) if pattern_end >= 0 else -1
            if replacement_end < 0:
                raise InvalidMappingRule(f"Invalid rule: `{text[start:_separator(text, pos)].strip()}`")
            pattern = _java_pattern(text[pos + len("RULE:") : pattern_end])
            replacement = text[pattern_end + 1 : replacement_end]
            pos = replacement_end + 1
            case = text[pos] if pos < len(text) and text[pos] in "LU" else ""
            pos += len(case)
            _java_replacement(replacement, pattern.groups)  # a bad replacement is refused now, not per client
            rule = _Rule(text[start:pos], pattern, replacement, case)
        end = _separator(text, pos)
        if rule is None:
            raise InvalidMappingRule(f"Invalid rule: `{text[start:end].strip()}`")
        if text[pos:end].strip():
            raise InvalidMappingRule(f"Invalid rule: `{text[start:end].strip()}`, "
                                     f"unmatched substring: `{text[pos:end].strip()}`")
        out.append(rule)
        pos = end


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` of one listener."""

    def __init__(self, rules: str | None = DEFAULT_RULES) -> None:
        self.rules = parse_rules(rules)

    def name(self, dn: str) -> str:
        """The principal name of a certificate subject; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(r.text for r in self.rules)}]")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(r.text for r in self.rules)}])"
