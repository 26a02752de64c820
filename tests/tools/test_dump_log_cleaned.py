"""`tieredlog dump-log` on a segment as the log cleaner leaves it, run as a real subprocess: offset
gaps inside and between batches (lastOffset from the header, each record with its own offset), an
emptied batch kept for its producer state (count 0, no record lines) and batches carrying KIP-534's
delete horizon (`deleteHorizonMs:` after `isControl`, only when the flag is set)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tieredlog.records.batch import read_header
from tieredlog.records.record import CONTROL_COMMIT, Record, build_batch, build_control_batch, build_empty_batch

pytestmark = pytest.mark.integration  # runs the CLI as a real process

REPO = Path(__file__).resolve().parents[2]
SEG = "00000000000000000100"
T = 1_700_000_000_000
HORIZON = T + 86_400_000


def run(*args):
    p = subprocess.run(
        [sys.executable, "-m", "tieredlog.cli", "dump-log", *map(str, args)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert "Traceback" not in p.stderr, p.stderr
    return p


def parts() -> list[bytes]:
    return [
        # 100..103 with 101 and 102 compacted away; an idempotent producer's sequences 0..3
        build_batch([Record(100, T, b"a", b"1"), Record(103, T + 3, b"b", b"2")], base_offset=100,
                    producer_id=7, producer_epoch=0, base_sequence=0, partition_leader_epoch=0),
        # 104..107: every record gone, the header kept for producer 7's last sequence (7)
        build_empty_batch(104, 107, 7, 0, 4, 0, 0, T + 7, False, False),
        # 108..109 gone with their batch; a tombstone whose batch the cleaner stamped with a horizon
        build_batch([Record(111, T + 11, b"c", None)], base_offset=110, partition_leader_epoch=1,
                    delete_horizon_ms=HORIZON),
        # a compressed batch with a gap inside
        build_batch([Record(112, T + 12, b"d", b"x" * 30), Record(115, T + 15, b"e", b"y" * 30)],
                    base_offset=112, codec=1, partition_leader_epoch=1),
        # an emptied transactional batch that also carries a horizon, then its kept marker
        build_empty_batch(116, 117, 9, 2, 0, 1, 0, T + 17, True, False, delete_horizon_ms=HORIZON),
        build_control_batch(CONTROL_COMMIT, 9, 2, 118, T + 18, coordinator_epoch=5, partition_leader_epoch=1),
    ]


@pytest.fixture(scope="module")
def seg(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("compacted-0")
    path = d / f"{SEG}.log"
    path.write_bytes(b"".join(parts()))
    return path


def batch_line(pos: int, b: bytes, extra: str = "") -> str:
    h = read_header(b)
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} {extra}"
        f"position: {pos} CreateTime: {h.max_timestamp} size: {len(b)} magic: 2 "
        f"compresscodec: {['none', 'gzip'][h.compression]} crc: {h.crc} isvalid: true"
    )


def test_cleaned_segment_batches(seg):
    p = run(seg)
    assert p.returncode == 0, p.stderr
    bs = parts()
    pos = [0]
    for b in bs:
        pos.append(pos[-1] + len(b))
    horizon = f"deleteHorizonMs: {HORIZON} "
    assert p.stdout.splitlines() == [
        f"Dumping {seg}",
        "Log starting offset: 100",
        batch_line(pos[0], bs[0]),
        batch_line(pos[1], bs[1]),
        batch_line(pos[2], bs[2], horizon),
        batch_line(pos[3], bs[3]),
        batch_line(pos[4], bs[4], horizon),
        batch_line(pos[5], bs[5]),
    ]
    lines = p.stdout.splitlines()
    # spot checks that do not go through read_header: the header's span, not the records', and the
    # producer's sequences over the whole span
    assert lines[2].startswith("baseOffset: 100 lastOffset: 103 count: 2 baseSequence: 0 lastSequence: 3 ")
    assert lines[3].startswith("baseOffset: 104 lastOffset: 107 count: 0 baseSequence: 4 lastSequence: 7 ")
    assert "size: 61 " in lines[3] and f"CreateTime: {T + 7} " in lines[3]
    assert f"isControl: false deleteHorizonMs: {HORIZON} position: {pos[2]} CreateTime: {T + 11} " in lines[4]
    assert lines[6].startswith("baseOffset: 116 lastOffset: 117 count: 0 ")
    assert "isTransactional: true isControl: false deleteHorizonMs: " in lines[6]
    assert sum("deleteHorizonMs" in line for line in lines) == 2


def test_cleaned_segment_records(seg):
    p = run("--print-data", seg)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    records = [line for line in lines if line.startswith("| ")]
    assert records == [
        f"| offset: 100 CreateTime: {T} keySize: 1 valueSize: 1 sequence: 0 headerKeys: [] key: a payload: 1",
        f"| offset: 103 CreateTime: {T + 3} keySize: 1 valueSize: 1 sequence: 3 headerKeys: [] key: b payload: 2",
        # below the horizon in the base timestamp, the record keeps its own time
        f"| offset: 111 CreateTime: {T + 11} keySize: 1 valueSize: -1 sequence: -1 headerKeys: [] key: c payload: null",
        f"| offset: 112 CreateTime: {T + 12} keySize: 1 valueSize: 30 sequence: -1 headerKeys: [] key: d "
        f"payload: {'x' * 30}",
        f"| offset: 115 CreateTime: {T + 15} keySize: 1 valueSize: 30 sequence: -1 headerKeys: [] key: e "
        f"payload: {'y' * 30}",
        f"| offset: 118 CreateTime: {T + 18} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 5",
    ]
    # the emptied batches are followed directly by the next batch line, no record under them
    for i, line in enumerate(lines):
        if " count: 0 " in line:
            assert lines[i + 1].startswith("baseOffset: ") or i + 1 == len(lines), lines[i + 1]


def test_emptied_batch_with_a_bad_crc_is_still_reported(tmp_path):
    # the header alone is under the CRC: a flipped count is caught, not printed as a valid empty batch
    b = bytearray(build_empty_batch(0, 3, 7, 0, 0, 0, 0, T, False, False))
    b[60] ^= 1
    path = tmp_path / f"{'0' * 20}.log"
    path.write_bytes(bytes(b))
    p = run("--print-data", path)
    assert p.returncode == 1
    assert "isvalid: false" in p.stdout
    assert "corrupt data at byte 0: batch CRC-32C mismatch" in p.stderr
