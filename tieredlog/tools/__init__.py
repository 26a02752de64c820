"""Command-line tools."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

# What a Unix tool killed by SIGPIPE reports (128 + 13), e.g. under `set -o pipefail`.
BROKEN_PIPE_EXIT = 141


def run_tool(fn: Callable[[], int]) -> int:
    """Run a tool's body so that ``tool | head`` ends quietly, like a Unix tool: the reader going
    away is not an error of ours, so no traceback and no error message, just exit 141. stdout is
    flushed here, inside the guard, because Python's own flush at exit would otherwise report the
    broken pipe on stderr."""
    try:
        rc = fn()
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        # anything still buffered goes nowhere, and the interpreter's final flush stays silent
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
        return BROKEN_PIPE_EXIT


def run_against_broker(tool: str, bootstrap: str, fn: Callable[[], int],
                       unreachable: tuple[type[BaseException], ...] = (OSError, ConnectionError)) -> int:
    """``run_tool`` for a tool that talks to a broker: one it cannot reach is one line on stderr, exit 1."""
    def body() -> int:
        try:
            return fn()
        except BrokenPipeError:
            raise  # our stdout, not the broker: run_tool ends quietly
        except unreachable as exc:
            print(f"tieredlog {tool}: cannot reach {bootstrap}: {exc}", file=sys.stderr)
            return 1

    return run_tool(body)


def package_version() -> str:
    """The installed package's version, as Kafka's tools print theirs for ``--version``; the source
    tree's when the package is not installed (run from a checkout)."""
    from importlib import metadata

    try:
        return metadata.version("tieredlog")
    except metadata.PackageNotFoundError:
        from tieredlog import __version__

        return __version__


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=package_version(),
                        help="print the version and exit")
