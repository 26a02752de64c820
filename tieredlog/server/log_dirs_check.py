"""Kafka's LogManager check of the log dirs at start-up: each one exists (created when missing), is a
readable directory, and takes a write, before the broker writes anything to any of them.

The write is what finds a read-only mount, a directory this user may not write, and a full disk (root
passes permission bits, so only a write tells); its file is removed at once. The failure is one line
naming the setting, its value and the directory, in Kafka's words.
"""

from __future__ import annotations

import os
from pathlib import Path

# one page: a file system that cannot take it cannot take a segment's first batch either
PROBE_BYTES = 4096
PROBE_NAME = ".tieredlog-write-check"


class LogDirError(Exception):
    """A log dir cannot be used; the message is the one line the broker prints."""


def check_log_dirs(setting: str, value: str, dirs: list[Path]) -> None:
    """Raise LogDirError for the first of ``dirs`` that cannot be used (``setting=value`` is what named
    them: log.dirs or log.dir)."""
    for d in dirs:
        problem = _problem(d.absolute())
        if problem is not None:
            raise LogDirError(f"{setting}={value}: Failed to create or validate data directory {d.absolute()}: "
                              f"{problem}")


def _problem(d: Path) -> str | None:
    if not d.exists():
        try:
            d.mkdir(parents=True)
        except FileExistsError:
            pass  # made meanwhile, or a dangling symlink: the checks below say which
        except OSError as exc:
            return f"cannot create it: {_reason(exc)}"
    if not d.is_dir() or not os.access(d, os.R_OK | os.X_OK):
        return f"{d} is not a readable log directory."
    probe = d / PROBE_NAME
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        return f"cannot write to it: {_reason(exc)}"
    try:
        os.write(fd, b"\0" * PROBE_BYTES)
        os.fsync(fd)
    except OSError as exc:
        return f"cannot write to it: {_reason(exc)}"
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)
    return None


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
