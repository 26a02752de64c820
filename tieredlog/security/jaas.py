"""JAAS configuration values as Kafka reads ``sasl.jaas.config``:

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

One or more ``<login module class> <control flag> (<name>=<value>)* ;`` entries. The tokens are those
of Java's StreamTokenizer as Kafka's JaasConfig sets it up: words (a letter, ``_``, ``$`` or a
non-ASCII character, then also digits, ``.`` and ``-``), quoted strings (``"..."`` or ``'...'`` with
backslash escapes), ``//`` and ``/* */`` comments. A value that is not a word (a number, ``a@b``) must
be quoted, as in Kafka.

Values are secrets: no error raised here quotes one; they name the key or the position only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTROL_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class JaasConfigError(ValueError):
    """A JAAS configuration that cannot be read; the message never contains a value."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    control_flag: str  # upper case, one of CONTROL_FLAGS
    options: dict[str, str] = field(default_factory=dict, repr=False)  # repr=False: options hold passwords


# token kinds
_WORD, _QUOTED, _NUMBER, _CHAR, _EOF = "word", "quoted", "number", "char", "eof"

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _word_start(c: str) -> bool:
    # StreamTokenizer's default word characters plus the '_' and '$' Kafka adds; '-' too, but a
    # leading '-' is read as a number first (its digit class wins), as Java does
    return c.isascii() and c.isalpha() or c in "_$" or ord(c) >= 160


def _word_part(c: str) -> bool:
    return _word_start(c) or c.isascii() and c.isdigit() or c in ".-"


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif c == "/":
            if text.startswith("//", i):
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise JaasConfigError("Unterminated /* comment in JAAS config")
                i = end + 2
            else:  # '/' is also StreamTokenizer's comment character: the rest of the line goes
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
        elif c in "\"'":
            value, i = _quoted(text, i)
            out.append((_QUOTED, value))
        elif c.isascii() and c.isdigit() or c in ".-":
            # a number to StreamTokenizer: it has no string value, so it cannot be a key or a value
            j = i + 1
            while j < n and (text[j].isascii() and text[j].isdigit() or text[j] == "."):
                j += 1
            if c == "-" and j == i + 1:
                out.append((_CHAR, c))
            else:
                out.append((_NUMBER, text[i:j]))
            i = j
        elif _word_start(c):
            j = i + 1
            while j < n and _word_part(text[j]):
                j += 1
            out.append((_WORD, text[i:j]))
            i = j
        else:
            out.append((_CHAR, c))
            i += 1
    out.append((_EOF, ""))
    return out


def _quoted(text: str, start: int) -> tuple[str, int]:
    quote = text[start]
    buf: list[str] = []
    i, n = start + 1, len(text)
    while i < n:
        c = text[i]
        if c == quote:
            return "".join(buf), i + 1
        if c in "\r\n":
            break  # Java ends such a string at the line's end; an error is kinder for a secret
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in "01234567":
                j = i + 1
                limit = i + (4 if nxt <= "3" else 3)
                while j < min(limit, n) and text[j] in "01234567":
                    j += 1
                buf.append(chr(int(text[i + 1 : j], 8)))
                i = j
                continue
            buf.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        buf.append(c)
        i += 1
    raise JaasConfigError("Unterminated quoted value in JAAS config")


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every entry of a ``sasl.jaas.config`` value; JaasConfigError with Kafka's messages."""
    toks = _tokens(text)
    pos = 0
    entries: list[JaasEntry] = []

    def string_value(tok: tuple[str, str]) -> str | None:
        return tok[1] if tok[0] in (_WORD, _QUOTED) else None

    while toks[pos][0] != _EOF:
        login_module = string_value(toks[pos])
        if login_module is None:
            raise JaasConfigError("Login module not specified in JAAS config")
        pos += 1
        if toks[pos][0] == _EOF:
            raise JaasConfigError("Login module control flag not specified in JAAS config")
        flag = string_value(toks[pos])
        if flag is None:
            raise JaasConfigError("Login module control flag is not available in the JAAS config")
        if flag.upper() not in CONTROL_FLAGS:
            raise JaasConfigError(f"Invalid login module control flag '{flag}' in JAAS config")
        pos += 1
        options: dict[str, str] = {}
        while toks[pos][0] != _EOF and toks[pos] != (_CHAR, ";"):
            key = string_value(toks[pos])
            pos += 1
            value = string_value(toks[pos + 1]) if toks[pos] == (_CHAR, "=") else None
            if key is None or value is None:
                raise JaasConfigError(f"Value not specified for key '{key or 'null'}' in JAAS config")
            options[key] = value
            pos += 2
        if toks[pos] != (_CHAR, ";"):
            raise JaasConfigError("JAAS config entry not terminated by semi-colon")
        pos += 1
        entries.append(JaasEntry(login_module, flag.upper(), options))
    if not entries:
        raise JaasConfigError("Login module not specified in JAAS config")
    return entries


def parse_single_module(text: str) -> JaasEntry:
    """A broker's ``sasl.jaas.config`` value: Kafka wants exactly one login module in it."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]
