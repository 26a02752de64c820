"""Command-line tools."""

from __future__ import annotations

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
