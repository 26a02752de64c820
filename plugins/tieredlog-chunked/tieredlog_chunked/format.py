"""The stored form of a segment's log: a small header (the chunk manifest) followed by every
transformed chunk, concatenated into one object so a segment costs one PUT and a read costs one
ranged GET per run of chunks.

    b"TLCHUNK1" | u32 big-endian header length | header JSON | chunk 0 | chunk 1 | ...

Header JSON: ``version``, ``chunk_size`` and ``original_size`` (bytes of the plain segment),
``compression`` (``"zstd"`` or null), ``encryption`` (``{"data_key": "<key id>:<b64>"}`` or null),
``chunks`` (transformed size of every chunk, in order).
"""

from __future__ import annotations

import itertools
import json
import struct
from dataclasses import dataclass

from tieredlog.rsm import RemoteStorageException

MAGIC = b"TLCHUNK1"
PREAMBLE = len(MAGIC) + 4
FORMAT_VERSION = 1
# The first read of a segment fetches this much, which holds the header of any segment up to
# several GiB at 4 MiB chunks; a longer header costs one more ranged read.
FIRST_READ = 8192


@dataclass(frozen=True)
class ChunkHeader:
    chunk_size: int
    original_size: int
    compression: str | None
    data_key: str | None
    chunks: tuple[int, ...]
    header_length: int = 0  # bytes before chunk 0, set when encoded or parsed

    @property
    def chunk_count(self) -> int:
        return len(self.chunks)

    @property
    def data_start(self) -> int:
        return PREAMBLE + self.header_length

    def transformed_offsets(self) -> list[int]:
        """Object position of each chunk, plus the end position as the last element."""
        return [self.data_start + o for o in itertools.accumulate(self.chunks, initial=0)]

    def original_range(self, index: int) -> tuple[int, int]:
        start = index * self.chunk_size
        return start, min(start + self.chunk_size, self.original_size)

    def encode(self) -> bytes:
        body = json.dumps({
            "version": FORMAT_VERSION, "chunk_size": self.chunk_size, "original_size": self.original_size,
            "compression": self.compression,
            "encryption": None if self.data_key is None else {"data_key": self.data_key},
            "chunks": list(self.chunks),
        }, separators=(",", ":")).encode()
        return MAGIC + struct.pack(">I", len(body)) + body


def header_length_from_preamble(preamble: bytes) -> int:
    if len(preamble) < PREAMBLE or preamble[:len(MAGIC)] != MAGIC:
        raise RemoteStorageException("segment object is not in the chunked format (bad magic)")
    return struct.unpack(">I", preamble[len(MAGIC):PREAMBLE])[0]


def parse_header(data: bytes) -> ChunkHeader:
    length = header_length_from_preamble(data)
    try:
        body = json.loads(data[PREAMBLE:PREAMBLE + length])
        if body["version"] != FORMAT_VERSION:
            raise ValueError(f"version {body['version']}")
        encryption = body.get("encryption")
        header = ChunkHeader(
            chunk_size=int(body["chunk_size"]), original_size=int(body["original_size"]),
            compression=body.get("compression"), data_key=encryption["data_key"] if encryption else None,
            chunks=tuple(int(c) for c in body["chunks"]), header_length=length)
    except (ValueError, KeyError, TypeError) as exc:
        raise RemoteStorageException(f"bad chunked segment header: {exc}") from None
    expected = -(-header.original_size // header.chunk_size) if header.chunk_size > 0 else -1
    if header.compression not in (None, "zstd") or expected != header.chunk_count:
        raise RemoteStorageException("bad chunked segment header: inconsistent chunk index")
    return header
