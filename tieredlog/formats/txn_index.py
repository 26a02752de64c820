"""The transaction index (``.txnindex``) in Apache Kafka's layout, and the search Kafka's
``TransactionIndex.collectAbortedTxns`` does over it.

Each 34-byte entry (big-endian) is ``version i16 (0) | producer id i64 | first offset i64 |
last offset i64 | last stable offset i64``: one aborted transaction whose abort marker lies in the segment.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

from tieredlog.formats.index import Buffer, CorruptIndexError

TXN_ENTRY = struct.Struct(">hqqqq")  # version (0), producer id, first, last, last stable offset
TXN_ENTRY_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return TXN_ENTRY.pack(TXN_ENTRY_VERSION, self.producer_id, self.first_offset, self.last_offset,
                              self.last_stable_offset)


def decode_txn_entries(data: Buffer, source: str) -> list[AbortedTxn]:
    """The entries of a transaction index file; CorruptIndexError for a partial or unknown entry
    (Kafka's AbortedTxn refuses any version but 0)."""
    if len(data) % TXN_ENTRY.size:
        raise CorruptIndexError(f"transaction index {source} has size {len(data)}, not a multiple of 34")
    out = []
    for version, pid, first, last, lso in TXN_ENTRY.iter_unpack(data):
        if version != TXN_ENTRY_VERSION:
            raise CorruptIndexError(f"transaction index {source} has an entry of unknown version {version}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    aborted: list[AbortedTxn]
    is_complete: bool  # an entry's LSO reached the upper bound: later segments cannot add more


def collect_aborted_txns(
    entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> TxnIndexSearchResult:
    """The transactions of one index that overlap ``[fetch_offset, upper_bound_offset)``. Complete at
    the first entry whose last_stable_offset reaches the upper bound: when that abort was written no
    transaction starting below the bound was still open, so no later index can hold one."""
    out = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            out.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(out, True)
    return TxnIndexSearchResult(out, False)


def collect_aborted_across(
    indexes: Iterable[Iterable[AbortedTxn]], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` from the txn
    indexes of consecutive segments, in log order, starting with the segment that holds
    ``fetch_offset``: a transaction's entry lives in the segment of its abort marker, which may come
    segments after its first record. ``indexes`` is consumed lazily and no further than the first
    complete search, so a caller may fetch each index only when it is reached. Each transaction
    once, even when two segments hold the same range (a remote copy and the local segment)."""
    out: list[AbortedTxn] = []
    seen: set[AbortedTxn] = set()
    for entries in indexes:
        found = collect_aborted_txns(entries, fetch_offset, upper_bound_offset)
        for txn in found.aborted:
            if txn not in seen:
                seen.add(txn)
                out.append(txn)
        if found.is_complete:
            break
    return out
