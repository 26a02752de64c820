"""CPU seconds of processes, read from /proc (Linux): what a benchmark charges to the broker, the S3
server or the clients it started."""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(pid: int | str) -> list[str]:
    # the fields after the command name, which may itself hold spaces and parentheses
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parents() -> dict[int, int]:
    """Every live process's parent."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = int(_stat_fields(entry.name)[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def live_children(pid: int | None = None) -> list[int]:
    """The live child processes of ``pid`` (default: this one)."""
    me = os.getpid() if pid is None else pid
    return [child for child, parent in parents().items() if parent == me]


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` to ``cpus`` (threads it starts later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, PermissionError):
            continue  # a thread that ended meanwhile
