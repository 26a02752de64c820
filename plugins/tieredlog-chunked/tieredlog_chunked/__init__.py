"""tieredlog-chunked: a RemoteStorageManager plugin that stores segments as chunks (optionally zstd
compressed and AES-GCM encrypted) on top of any other tieredlog RSM. See README.md."""

from tieredlog_chunked.rsm import ChunkedRemoteStorageManager, FetchStats

__all__ = ["ChunkedRemoteStorageManager", "FetchStats"]
