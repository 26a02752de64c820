"""`tieredlog dump-log [--print-data] FILE...`: print what is inside log files, like kafka-dump-log.sh.

Handles segments (`.log`, magic 0/1/2), `.index`, `.timeindex`, `.txnindex`, producer `.snapshot`,
`leader-epoch-checkpoint` and the offset checkpoints, both under Kafka's local names and the
remote tier's `<offset>-<uuid>.<suffix>` names. Indexes are read as raw fixed-size entries, so this
works on any file without the broker's index code. On corrupt input it prints everything it read,
then `corrupt data at byte N: <reason>`, and exits with 1.

Cleaned (compacted) segments print as they are: a batch's lastOffset and lastSequence come from
its header, whatever records the cleaner removed; a batch emptied for its producer state prints
`count: 0` and no record; a batch with KIP-534's delete-horizon flag adds `deleteHorizonMs: <ms>`
after `isControl`. Kafka 3.1+ prints that field on every batch (`OptionalLong.empty` when unset);
here it appears only when set, so other batches print as they always have.
"""

from __future__ import annotations

import argparse
import mmap
import re
import struct
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from tieredlog.formats.checkpoints import CHECKPOINT_VERSION, parse_epoch_line, parse_offset_line
from tieredlog.formats.errors import RecordError
from tieredlog.formats.index import OFFSET_ENTRY, TIME_ENTRY
from tieredlog.formats.producer_snapshot import SNAPSHOT_HEADER, CorruptSnapshotError
from tieredlog.formats.txn_index import TXN_ENTRY, TXN_ENTRY_VERSION
from tieredlog.log.producer_state import decode_snapshot
from tieredlog.records.batch import (
    COMPRESSION_NAMES,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    compute_crc,
    read_header,
)
from tieredlog.records.legacy import iter_legacy_messages
from tieredlog.records.record import CONTROL_ABORT, CONTROL_COMMIT, decode_batch, parse_control_record
from tieredlog.tools import run_tool

_PREFIX = struct.Struct(">qi")
_LEGACY_MIN_LENGTH = {0: 14, 1: 22}
_BASE_OFFSET = re.compile(r"^(\d+)")


class Corrupt(Exception):
    def __init__(self, position: int, reason: str):
        super().__init__(reason)
        self.position = position
        self.reason = reason


class _Out:
    """stdout with a line helper; kept tiny so each dumper stays readable."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def __call__(self, line: str) -> None:
        self.stream.write(line + "\n")


def _base_offset(path: Path) -> int:
    m = _BASE_OFFSET.match(path.name)
    return int(m.group(1)) if m else 0


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", "backslashreplace")


def _ts_label(timestamp_type: int) -> str:
    return {0: "CreateTime", 1: "LogAppendTime"}.get(timestamp_type, "NoTimestampType")


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes, memory-mapped so a 1 GB segment is not read into memory at once."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            yield b""
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield m
        finally:
            try:
                m.close()
            except BufferError:
                pass  # a memoryview into it is still referenced (by an error's traceback); GC unmaps it


# ---------------------------------------------------------------------------------------------
# segments


def _dump_log(path: Path, out: _Out, print_data: bool) -> None:
    out(f"Log starting offset: {_base_offset(path)}")
    with _mapped(path) as buf:
        n = len(buf)
        pos = 0
        while pos < n:
            if n - pos < LOG_OVERHEAD + 5:
                raise Corrupt(pos, f"truncated batch: only {n - pos} bytes remain")
            _, length = _PREFIX.unpack_from(buf, pos)
            magic = buf[pos + MAGIC_OFFSET]
            minimum = HEADER_SIZE - LOG_OVERHEAD if magic == 2 else _LEGACY_MIN_LENGTH.get(magic)
            if minimum is None:
                raise Corrupt(pos + MAGIC_OFFSET, f"unknown magic {magic}")
            if length < minimum:
                raise Corrupt(pos + 8, f"batch length {length} is below the minimum {minimum} for magic {magic}")
            size = length + LOG_OVERHEAD
            if pos + size > n:
                raise Corrupt(pos, f"batch declares {size} bytes but only {n - pos} remain")
            if magic == 2:
                _dump_v2_batch(buf, pos, out, print_data)
            else:
                _dump_legacy_entry(buf, pos, size, out, print_data)
            pos += size


def _dump_v2_batch(buf, pos: int, out: _Out, print_data: bool) -> None:
    h = read_header(buf, pos)
    computed = compute_crc(buf, pos, h.size)
    valid = computed == h.crc
    # A cleaned segment shows through the header alone: lastOffset from lastOffsetDelta (the offsets
    # the cleaner removed stay inside the batch's span), count 0 for a batch kept only for its
    # producer state, and the KIP-534 delete horizon where the base timestamp now holds it.
    horizon = h.delete_horizon_ms
    out(
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
        + ("" if horizon is None else f"deleteHorizonMs: {horizon} ")
        + f"position: {pos} {_ts_label(h.timestamp_type)}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {COMPRESSION_NAMES.get(h.compression, h.compression)} crc: {h.crc} "
        f"isvalid: {str(valid).lower()}"
    )
    if not valid:
        raise Corrupt(pos, f"batch CRC-32C mismatch (stored {h.crc:#010x}, computed {computed:#010x})")
    if not print_data:
        return
    try:
        _, records = decode_batch(buf, pos, verify_crc=False)
    except RecordError as e:
        raise Corrupt(pos if e.position is None else e.position, str(e)) from None
    for r in records:
        seq = -1 if h.base_sequence < 0 else (h.base_sequence + r.offset - h.base_offset) % (1 << 31)
        line = (
            f"| offset: {r.offset} {_ts_label(h.timestamp_type)}: {r.timestamp} "
            f"keySize: {-1 if r.key is None else len(r.key)} valueSize: {-1 if r.value is None else len(r.value)} "
            f"sequence: {seq} headerKeys: [{','.join(k for k, _ in r.headers)}]"
        )
        if h.is_control:
            line += " " + _control_text(h, r)
        else:
            if r.key is not None:
                line += f" key: {_text(r.key)}"
            line += f" payload: {_text(r.value)}"
            if r.headers:
                line += " headers: [" + ", ".join(f"{k}={_text(v)}" for k, v in r.headers) + "]"
        out(line)


def _control_text(h: BatchHeader, record) -> str:
    try:
        c = parse_control_record(record)
    except RecordError as e:
        return f"controlRecord: unreadable ({e})"
    if c.type in (CONTROL_ABORT, CONTROL_COMMIT):
        name = "ABORT" if c.type == CONTROL_ABORT else "COMMIT"
        return f"endTxnMarker: {name} coordinatorEpoch: {c.coordinator_epoch}"
    return f"controlType: {c.type}"


def _dump_legacy_entry(buf, pos: int, size: int, out: _Out, print_data: bool) -> None:
    # The view ends with this entry, so the iterator yields exactly its (inner) messages.
    try:
        msgs = list(iter_legacy_messages(memoryview(buf)[: pos + size], pos))
    except RecordError as e:
        raise Corrupt(pos if e.position is None else e.position, str(e)) from None
    first, last = msgs[0], msgs[-1]
    codec = first.compression
    outer_ts = max(m.timestamp for m in msgs)
    out(
        f"baseOffset: {first.offset} lastOffset: {last.offset} count: {len(msgs)} position: {pos} "
        f"{_ts_label(first.timestamp_type)}: {outer_ts} size: {size} magic: {first.magic} "
        f"compresscodec: {COMPRESSION_NAMES.get(codec, codec)} crc: {_legacy_crc(buf, pos)} isvalid: true"
    )
    if print_data:
        for m in msgs:
            out(
                f"| offset: {m.offset} {_ts_label(m.timestamp_type)}: {m.timestamp} "
                f"keySize: {-1 if m.key is None else len(m.key)} valueSize: {-1 if m.value is None else len(m.value)}"
                + (f" key: {_text(m.key)}" if m.key is not None else "")
                + f" payload: {_text(m.value)}"
            )


def _legacy_crc(buf, pos: int) -> int:
    return struct.unpack_from(">I", buf, pos + LOG_OVERHEAD)[0]


# ---------------------------------------------------------------------------------------------
# indexes


def _fixed_entries(buf, entry: struct.Struct) -> Iterator[tuple[int, tuple]]:
    n = len(buf) - len(buf) % entry.size
    for pos in range(0, n, entry.size):
        yield pos, entry.unpack_from(buf, pos)
    if len(buf) % entry.size:
        raise Corrupt(n, f"trailing partial entry of {len(buf) % entry.size} bytes ({entry.size}-byte entries)")


def _dump_offset_index(path: Path, out: _Out, print_data: bool) -> None:
    base = _base_offset(path)
    prev = None
    with _mapped(path) as buf:
        for pos, (rel, position) in _fixed_entries(buf, OFFSET_ENTRY):
            if pos and rel == 0 and position == 0:
                return  # the zero-filled, preallocated tail of an active segment's index
            if prev is not None and (rel <= prev[0] or position < prev[1]):
                raise Corrupt(pos, f"entry (offset {base + rel}, position {position}) does not follow "
                                   f"(offset {base + prev[0]}, position {prev[1]})")
            out(f"offset: {base + rel} position: {position}")
            prev = (rel, position)


def _dump_time_index(path: Path, out: _Out, print_data: bool) -> None:
    base = _base_offset(path)
    prev = None
    with _mapped(path) as buf:
        for pos, (ts, rel) in _fixed_entries(buf, TIME_ENTRY):
            if pos and ts == 0 and rel == 0:
                return
            if prev is not None and (ts < prev[0] or rel < prev[1]):
                raise Corrupt(pos, f"entry (timestamp {ts}, offset {base + rel}) does not follow "
                                   f"(timestamp {prev[0]}, offset {base + prev[1]})")
            out(f"timestamp: {ts} offset: {base + rel}")
            prev = (ts, rel)


def _dump_txn_index(path: Path, out: _Out, print_data: bool) -> None:
    with _mapped(path) as buf:
        for pos, (version, pid, first, last, lso) in _fixed_entries(buf, TXN_ENTRY):
            if version != TXN_ENTRY_VERSION:
                raise Corrupt(pos, f"unknown transaction index entry version {version}")
            out(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}")


# ---------------------------------------------------------------------------------------------
# producer snapshots and checkpoints


def _dump_snapshot(path: Path, out: _Out, print_data: bool) -> None:
    data = path.read_bytes()
    if len(data) >= SNAPSHOT_HEADER.size:
        version, crc = SNAPSHOT_HEADER.unpack_from(data, 0)
        out(f"version: {version} crc: {crc}")
    try:
        entries = decode_snapshot(data)
    except CorruptSnapshotError as e:
        raise Corrupt(e.position, str(e)) from None
    for entry in entries:
        b = entry.batches[-1] if entry.batches else None
        out(
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} coordinatorEpoch: {entry.coordinator_epoch} "
            f"currentTxnFirstOffset: {-1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset} "
            f"lastTimestamp: {entry.last_timestamp} "
            + (
                f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                f"offsetDelta: {b.offset_delta} timestamp: {b.timestamp}"
                if b
                else "firstSequence: -1 lastSequence: -1 lastOffset: -1 offsetDelta: 0 timestamp: -1"
            )
        )


def _checkpoint_lines(path: Path, out: _Out, parse_line: Callable[[str], tuple[Any, ...]],
                      fmt: Callable[..., str]) -> None:
    """Print a version-0 checkpoint line by line, so a bad line is reported by its byte position (the
    lines are read by the broker's own rules, :mod:`tieredlog.formats.checkpoints`)."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    positions = []
    p = 0
    for line in lines:
        positions.append(p)
        p += len(line) + 1
    if not data:
        return

    def text(i: int) -> str:
        try:
            return lines[i].decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise Corrupt(positions[i] + e.start, "not UTF-8 text") from None

    if text(0) != str(CHECKPOINT_VERSION):
        raise Corrupt(0, f"unrecognized checkpoint version {text(0)!r}")
    if len(lines) < 2 or not text(1).isdigit():
        raise Corrupt(positions[1] if len(lines) > 1 else len(data), "missing or bad entry count")
    expected = int(text(1))
    out(f"version: {CHECKPOINT_VERSION} count: {expected}")
    found = 0
    for i in range(2, len(lines)):
        t = text(i)
        if not t:
            continue
        try:
            entry = parse_line(t)
        except ValueError:
            raise Corrupt(positions[i], f"malformed line {i + 1}: {t!r}") from None
        out(fmt(*entry))
        found += 1
    if found != expected:
        raise Corrupt(len(data), f"expected {expected} entries but found {found}")


def _dump_leader_epoch(path: Path, out: _Out, print_data: bool) -> None:
    _checkpoint_lines(path, out, parse_epoch_line, lambda epoch, start: f"epoch: {epoch} startOffset: {start}")


def _dump_offset_checkpoint(path: Path, out: _Out, print_data: bool) -> None:
    _checkpoint_lines(path, out, parse_offset_line, lambda t, p, o: f"topic: {t} partition: {p} offset: {o}")


def _dumper_for(path: Path) -> Callable[[Path, _Out, bool], None] | None:
    name = path.name
    if name.endswith(".log"):
        return _dump_log
    if name.endswith(".index"):
        return _dump_offset_index
    if name.endswith(".timeindex"):
        return _dump_time_index
    if name.endswith(".txnindex"):
        return _dump_txn_index
    if name.endswith(".snapshot"):
        return _dump_snapshot
    if name == "leader-epoch-checkpoint" or name.endswith(".leader_epoch_checkpoint"):
        return _dump_leader_epoch
    if name.endswith("-checkpoint"):
        return _dump_offset_checkpoint
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog dump-log", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", metavar="FILE", help="files to dump")
    p.add_argument("--files", action="append", default=[], help="comma-separated files (kafka-dump-log style)")
    p.add_argument(
        "--print-data", "--print-data-log", "--deep-iteration", dest="print_data", action="store_true",
        help="print every record's offset, timestamp, key, payload and headers",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return run_tool(lambda: _run(args))


def _run(args) -> int:
    paths = [Path(x) for x in args.paths] + [Path(x) for f in args.files for x in f.split(",") if x]
    if not paths:
        print("tieredlog dump-log: no files given (see --help)", file=sys.stderr)
        return 2
    out = _Out(sys.stdout)
    rc = 0
    for path in paths:
        dumper = _dumper_for(path)
        if dumper is None:
            print(f"tieredlog dump-log: {path}: unknown file type", file=sys.stderr)
            rc = 1
            continue
        if not path.is_file():
            why = "not a regular file" if path.exists() else "no such file"
            print(f"tieredlog dump-log: {path}: {why}", file=sys.stderr)
            rc = 1
            continue
        out(f"Dumping {path}")
        try:
            dumper(path, out, args.print_data)
        except Corrupt as e:
            sys.stdout.flush()
            print(f"{path}: corrupt data at byte {e.position}: {e.reason}", file=sys.stderr)
            rc = 1
        except BrokenPipeError:
            raise  # stdout's reader went away, not a problem with this file: run_tool ends quietly
        except OSError as e:
            print(f"tieredlog dump-log: {path}: {e.strerror or e}", file=sys.stderr)
            rc = 1
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
