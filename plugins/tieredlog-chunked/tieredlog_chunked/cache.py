"""A bounded on-disk cache of decoded chunks, least recently used out first.

The folder is private to one RSM instance (a fresh subfolder of ``fetch.chunk.cache.path``, removed
on close), so nothing stale survives a restart and two brokers may share a parent path. Cached
chunks are plaintext: put the path on an encrypted disk when the plugin encrypts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections import OrderedDict
from pathlib import Path

ChunkKey = tuple[uuid.UUID, int]  # (segment id, chunk index)


class DiskChunkCache:
    def __init__(self, parent: Path, max_bytes: int) -> None:
        parent.mkdir(parents=True, exist_ok=True)  # unlike Aiven's, a missing path is created
        self.folder = Path(tempfile.mkdtemp(prefix="tieredlog-chunks-", dir=parent))
        self.max_bytes = max_bytes
        self._entries: OrderedDict[ChunkKey, int] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _path(self, key: ChunkKey) -> Path:
        return self.folder / f"{key[0].hex}-{key[1]}"

    @property
    def size(self) -> int:
        with self._lock:
            return self._size

    def __contains__(self, key: ChunkKey) -> bool:
        with self._lock:
            return key in self._entries

    def get(self, key: ChunkKey) -> bytes | None:
        with self._lock:
            if key not in self._entries:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            # Open under the lock: an eviction may unlink the file next, and an open file stays readable.
            f = self._path(key).open("rb")
        with f:
            return f.read()

    def put(self, key: ChunkKey, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        tmp = self.folder / f".{uuid.uuid4().hex}.tmp"
        tmp.write_bytes(data)
        with self._lock:
            os.replace(tmp, self._path(key))
            self._size += len(data) - self._entries.pop(key, 0)
            self._entries[key] = len(data)
            while self._size > self.max_bytes:
                old, size = self._entries.popitem(last=False)
                self._size -= size
                self._path(old).unlink(missing_ok=True)

    def invalidate_segment(self, segment_id: uuid.UUID) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == segment_id]:
                self._size -= self._entries.pop(key)
                self._path(key).unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0
            shutil.rmtree(self.folder, ignore_errors=True)
