"""Atomic file replacement: a crash leaves the old file or the new one, never a torn one.

The new content goes to a temporary file in the same folder, is fsynced, renamed over the old file,
and the folder is fsynced so the rename itself survives a crash. One implementation for the log's
checkpoints and snapshots, the RLMM's snapshots, the remote index cache and the local RSM's objects;
it lives outside every layer, with nothing but the standard library, because the RSM may not import
the broker (a plugin author imports only ``tieredlog.rsm``).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

__all__ = ["fsync_dir", "atomic_write", "atomic_copy", "atomic_copy_file", "SourceTooLargeError"]

_COPY_CHUNK = 1 << 20
# bytes per copy_file_range/sendfile call: the kernel copies them without waking Python
_KERNEL_CHUNK = 1 << 30
# a kernel copy these errors refuse (another file system, an old kernel, a file type it cannot copy)
# is done by the next way, before any byte has been written
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF, errno.EPERM}


class SourceTooLargeError(ValueError):
    """``atomic_copy`` read more than ``max_bytes``; nothing was replaced."""


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename inside it is durable. No-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` through ``<path>.tmp`` (Kafka's naming; the loaders delete such
    leftovers). ``sync=False``: no fsync at all (the caller makes the file durable later)."""
    _replace(Path(path), lambda out: out.write(data), sync=sync, sync_dir=sync, unique_tmp=False)


def atomic_copy(
    dest: str | os.PathLike[str],
    source: BinaryIO,
    *,
    sync: bool = True,
    sync_dir: bool = True,
    unique_tmp: bool = False,
    max_bytes: int | None = None,
) -> int:
    """Replace ``dest`` with everything ``source`` reads, streamed in 1 MiB chunks (never whole in
    memory); returns the bytes written.

    ``sync_dir=False``: the caller fsyncs the folder once after several files. ``unique_tmp``: a
    temporary name of its own (``<name>.<random>.tmp``) for files that concurrent writers may
    replace at once. More than ``max_bytes``: SourceTooLargeError, and ``dest`` is left as it was.
    """
    dest = Path(dest)

    def copy(out: BinaryIO) -> None:
        written = 0
        while chunk := source.read(_COPY_CHUNK):
            written += len(chunk)
            if max_bytes is not None and written > max_bytes:
                raise SourceTooLargeError(f"{dest.name}: more than {max_bytes} bytes")
            out.write(chunk)

    return _replace(dest, copy, sync=sync, sync_dir=sync_dir, unique_tmp=unique_tmp)


def atomic_copy_file(
    dest: str | os.PathLike[str], source: BinaryIO, *, sync: bool = True, sync_dir: bool = True, unique_tmp: bool = False
) -> int:
    """Replace ``dest`` with ``source`` (a file opened unbuffered, ``buffering=0``, at its start),
    copied by the kernel: copy_file_range (a clone on file systems that share blocks), else sendfile,
    else read and write in 1 MiB chunks; the bytes never pass through Python. Returns the bytes
    written. Options as :func:`atomic_copy`'s."""
    src_fd = source.fileno()

    def copy(out: BinaryIO) -> None:
        out.flush()
        out_fd = out.fileno()
        for kernel_copy in (_copy_file_range, _sendfile):
            if kernel_copy(src_fd, out_fd):
                return
        while chunk := source.read(_COPY_CHUNK):
            out.write(chunk)

    return _replace(Path(dest), copy, sync=sync, sync_dir=sync_dir, unique_tmp=unique_tmp)


def _copy_file_range(src_fd: int, out_fd: int) -> bool:
    """Copy the rest of ``src_fd``; False, having copied nothing, when the kernel cannot (or the
    file was empty)."""
    copied = False
    while True:
        try:
            n = os.copy_file_range(src_fd, out_fd, _KERNEL_CHUNK)
        except (AttributeError, OSError) as exc:  # AttributeError: no copy_file_range on this platform
            if copied or (isinstance(exc, OSError) and exc.errno not in _NO_KERNEL_COPY):
                raise
            return False
        if n == 0:
            # nothing at all: an empty file, or one the kernel reads as empty (some special
            # file systems do); the next way finds out which
            return copied
        copied = True


def _sendfile(src_fd: int, out_fd: int) -> bool:
    copied = False
    while True:
        try:
            n = os.sendfile(out_fd, src_fd, None, _KERNEL_CHUNK)
        except (AttributeError, OSError) as exc:
            if copied or (isinstance(exc, OSError) and exc.errno not in _NO_KERNEL_COPY):
                raise
            return False
        if n == 0:
            return copied
        copied = True


def _replace(dest: Path, write: Callable[[BinaryIO], object], *, sync: bool, sync_dir: bool, unique_tmp: bool) -> int:
    if unique_tmp:
        fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=dest.parent)
        tmp = Path(tmp_name)
        f = os.fdopen(fd, "wb")
    else:
        tmp = dest.with_name(dest.name + ".tmp")
        f = open(tmp, "wb")
    try:
        with f:
            write(f)
            f.flush()
            if sync:
                os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync and sync_dir:
        fsync_dir(dest.parent)
    return size
