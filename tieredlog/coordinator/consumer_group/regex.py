"""`subscribed_topic_regex`, matched on the broker.

Kafka compiles it with RE2/J and matches whole topic names. We use Python's `re` restricted to what RE2
also accepts, so a pattern never backtracks without bound and means the same on both: no lookaround, no
backreferences, no possessive or atomic groups, no conditionals, at most 255 characters. A pattern outside
that subset, or one `re` cannot compile, is refused with INVALID_REGULAR_EXPRESSION. Topics whose names
start with "__" (internal topics) never match.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

MAX_LENGTH = 255
_UNSAFE = re.compile(r"\(\?(?:[=!]|<[=!]|P=|>|\()|\\[1-9]|\\g<|[*+?}]\+")


class InvalidRegex(ValueError):
    pass


@functools.lru_cache(maxsize=256)
def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    if len(pattern) > MAX_LENGTH:
        raise InvalidRegex(f"regular expression longer than {MAX_LENGTH} characters")
    if _UNSAFE.search(pattern):
        raise InvalidRegex("lookaround, backreferences, atomic groups and conditionals are not supported")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRegex(str(exc)) from None


def matching_topics(pattern: str, names: Iterable[str]) -> set[str]:
    compiled = compile_topic_regex(pattern)
    return {n for n in names if not n.startswith("__") and compiled.fullmatch(n)}
