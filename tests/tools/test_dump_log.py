"""`tieredlog dump-log` run as a real subprocess on files built here."""

import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tieredlog.log.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from tieredlog.log.producer_state import ProducerStateManager
from tieredlog.log.types import EpochEntry, TopicPartition
from tieredlog.records.batch import BatchHeader
from tieredlog.records.record import build_batch, build_control_batch

pytestmark = pytest.mark.integration  # runs the CLI as a real process

REPO = Path(__file__).resolve().parents[2]
SEG = "00000000000000000100"


def run(*args):
    p = subprocess.run(
        [sys.executable, "-m", "tieredlog.cli", "dump-log", *map(str, args)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert "Traceback" not in p.stderr, p.stderr
    return p


def batches():
    b1 = build_batch(
        [(b"k1", b"hello", [("trace", b"abc")], 1000), (None, b"world", [], 1001)],
        base_offset=100, partition_leader_epoch=0,
    )
    b2 = build_batch(
        [(b"a", b"x" * 50, [], 2000)] * 3,
        base_offset=102, codec=1, producer_id=7, producer_epoch=1, base_sequence=0,
        is_transactional=True, partition_leader_epoch=1,
    )
    b3 = build_control_batch(0, 7, 1, 105, 3000, coordinator_epoch=2, partition_leader_epoch=1)
    return b1, b2, b3


@pytest.fixture(scope="module")
def seg(tmp_path_factory):
    d = tmp_path_factory.mktemp("t-0")
    b1, b2, b3 = batches()
    (d / f"{SEG}.log").write_bytes(b1 + b2 + b3)
    # offset index: (relative offset, position), with a preallocated zero tail
    (d / f"{SEG}.index").write_bytes(struct.pack(">iiii", 0, 0, 2, len(b1)) + bytes(8 * 4))
    (d / f"{SEG}.timeindex").write_bytes(struct.pack(">qiqi", 1001, 1, 2000, 4) + bytes(12 * 2))
    (d / f"{SEG}.txnindex").write_bytes(struct.pack(">hqqqq", 0, 7, 102, 105, 102))
    LeaderEpochCheckpointFile(d / "leader-epoch-checkpoint").write([EpochEntry(0, 100), EpochEntry(1, 102)])
    OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").write({TopicPartition("t", 0): 106})
    psm = ProducerStateManager(d)
    psm.update(BatchHeader(0, 0, 0, 2, 0, 0x10, 2, 0, 0, 7, 1, 0, 3), 102, 2000)
    psm.take_snapshot(105)
    return d


def test_log_batches_and_records(seg):
    p = run("--print-data", seg / f"{SEG}.log")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"Dumping {seg / (SEG + '.log')}"
    assert lines[1] == "Log starting offset: 100"
    b1, b2, _ = batches()
    batch_lines = [l for l in lines if l.startswith("baseOffset:")]
    assert len(batch_lines) == 3
    assert batch_lines[0].startswith(
        "baseOffset: 100 lastOffset: 101 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false position: 0 "
        f"CreateTime: 1001 size: {len(b1)} magic: 2 compresscodec: none crc: "
    )
    assert batch_lines[0].endswith("isvalid: true")
    assert "producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 1 isTransactional: true" in batch_lines[1]
    assert f"position: {len(b1)} " in batch_lines[1] and "compresscodec: gzip" in batch_lines[1]
    assert "isControl: true" in batch_lines[2]
    assert (
        "| offset: 100 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: -1 headerKeys: [trace] key: k1 "
        "payload: hello headers: [trace=abc]" in lines
    )
    assert "| offset: 101 CreateTime: 1001 keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] payload: world" in lines
    assert sum(1 for l in lines if l.startswith("| offset: 10") and "payload: " + "x" * 50 in l) == 3
    assert any("sequence: 2 " in l and l.startswith("| offset: 104 ") for l in lines)
    assert lines[-1].endswith("endTxnMarker: ABORT coordinatorEpoch: 2")

    # Without --print-data only the batch lines.
    p = run(seg / f"{SEG}.log")
    assert p.returncode == 0 and not any(l.startswith("|") for l in p.stdout.splitlines())


def test_indexes_snapshot_and_checkpoints(seg):
    names = [f"{SEG}.index", f"{SEG}.timeindex", f"{SEG}.txnindex", f"{SEG[:-3]}105.snapshot",
             "leader-epoch-checkpoint", "recovery-point-offset-checkpoint"]
    p = run("--files", ",".join(str(seg / n) for n in names))
    assert p.returncode == 0, p.stderr
    b1, _, _ = batches()
    out = p.stdout.splitlines()
    body = [l for l in out if not l.startswith("Dumping ")]
    assert body[:2] == ["offset: 100 position: 0", f"offset: 102 position: {len(b1)}"]
    assert body[2:4] == ["timestamp: 1001 offset: 101", "timestamp: 2000 offset: 104"]
    assert body[4] == "version: 0 producerId: 7 firstOffset: 102 lastOffset: 105 lastStableOffset: 102"
    assert body[5].startswith("version: 1 crc: ")
    assert body[6] == (
        "producerId: 7 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: 102 lastTimestamp: 2000 "
        "firstSequence: 0 lastSequence: 2 lastOffset: 104 offsetDelta: 2 timestamp: 2000"
    )
    assert body[7:10] == ["version: 0 count: 2", "epoch: 0 startOffset: 100", "epoch: 1 startOffset: 102"]
    assert body[10:] == ["version: 0 count: 1", "topic: t partition: 0 offset: 106"]


def legacy_message(offset, magic, key, value, timestamp=None):
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    entry = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(entry)) + entry


def test_legacy_message_sets(tmp_path):
    f = tmp_path / "00000000000000000000.log"
    m0 = legacy_message(0, 0, None, b"old")
    m1 = legacy_message(1, 1, b"k", b"newer", 5000)
    f.write_bytes(m0 + m1)
    p = run("--print-data", f)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert any(l.startswith("baseOffset: 0 lastOffset: 0 count: 1 position: 0 NoTimestampType: -1") and "magic: 0" in l
               for l in lines)
    assert any(l.startswith(f"baseOffset: 1 lastOffset: 1 count: 1 position: {len(m0)} CreateTime: 5000") and
               "magic: 1 compresscodec: none" in l for l in lines)
    assert "| offset: 0 NoTimestampType: -1 keySize: -1 valueSize: 3 payload: old" in lines
    assert "| offset: 1 CreateTime: 5000 keySize: 1 valueSize: 5 key: k payload: newer" in lines


def test_corrupt_crc_prints_what_was_read_then_the_byte(tmp_path):
    b1, b2, b3 = batches()
    data = bytearray(b1 + b2 + b3)
    data[len(b1) + 70] ^= 0x55  # inside the second batch's compressed records
    f = tmp_path / f"{SEG}.log"
    f.write_bytes(bytes(data))
    p = run("--print-data", f)
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert any(l.startswith("baseOffset: 100 ") and l.endswith("isvalid: true") for l in lines)
    assert any(l.startswith("baseOffset: 102 ") and l.endswith("isvalid: false") for l in lines)
    assert not any(l.startswith("baseOffset: 105 ") for l in lines)
    assert f"corrupt data at byte {len(b1)}: batch CRC-32C mismatch" in p.stderr


def test_truncated_segment(tmp_path):
    b1, b2, b3 = batches()
    f = tmp_path / f"{SEG}.log"
    f.write_bytes(b1 + b2 + b3[:-10])
    p = run(f)
    assert p.returncode == 1
    assert p.stdout.count("baseOffset:") == 2
    pos = len(b1) + len(b2)
    assert p.stderr.strip() == f"{f}: corrupt data at byte {pos}: batch declares {len(b3)} bytes but only {len(b3) - 10} remain"


def test_corrupt_index_snapshot_checkpoint_and_bad_paths(tmp_path):
    idx = tmp_path / f"{SEG}.index"
    idx.write_bytes(struct.pack(">iiii", 0, 0, 5, 80) + b"\x00\x00\x00")
    snap = tmp_path / "00000000000000000005.snapshot"
    psm = ProducerStateManager(tmp_path)
    psm.update(BatchHeader(0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 1), 4, 10)
    psm.take_snapshot(5)
    raw = bytearray(snap.read_bytes())
    raw[-1] ^= 1
    snap.write_bytes(bytes(raw))
    cp = tmp_path / "leader-epoch-checkpoint"
    cp.write_bytes(b"0\n2\n0 0\n1 x\n")
    bad_order = tmp_path / "00000000000000000200.timeindex"
    bad_order.write_bytes(struct.pack(">qiqi", 50, 3, 40, 4))
    p = run(idx, snap, cp, bad_order, tmp_path / "missing.log", tmp_path / "notes.txt")
    assert p.returncode == 1
    assert "offset: 100 position: 0\noffset: 105 position: 80\n" in p.stdout
    assert "epoch: 0 startOffset: 0" in p.stdout and "timestamp: 50 offset: 203" in p.stdout
    err = p.stderr.splitlines()
    assert err[0] == f"{idx}: corrupt data at byte 16: trailing partial entry of 3 bytes (8-byte entries)"
    assert err[1].startswith(f"{snap}: corrupt data at byte 2: CRC-32C mismatch")
    assert err[2] == f"{cp}: corrupt data at byte 8: malformed line 4: '1 x'"
    assert err[3].startswith(f"{bad_order}: corrupt data at byte 12: entry (timestamp 40, offset 204) does not follow")
    assert err[4] == f"tieredlog dump-log: {tmp_path / 'missing.log'}: no such file"
    assert err[5] == f"tieredlog dump-log: {tmp_path / 'notes.txt'}: unknown file type"


def test_console_script_and_usage(seg):
    exe = Path(sys.executable).with_name("tieredlog")
    p = subprocess.run([str(exe), "dump-log", str(seg / f"{SEG}.index")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "offset: 102 position: " in p.stdout
    p = run()
    assert p.returncode == 2 and "no files given" in p.stderr


def test_remote_tier_file_names(seg, tmp_path):
    # Remote objects are named <20-digit start offset>-<segment uuid>.<suffix>.
    remote = tmp_path / f"{SEG}-Vd3pK0W2Q2uT3xgA1bN7yQ.index"
    remote.write_bytes((seg / f"{SEG}.index").read_bytes())
    epochs = tmp_path / f"{SEG}-Vd3pK0W2Q2uT3xgA1bN7yQ.leader_epoch_checkpoint"
    epochs.write_bytes((seg / "leader-epoch-checkpoint").read_bytes())
    p = run(remote, epochs)
    assert p.returncode == 0, p.stderr
    assert "offset: 100 position: 0" in p.stdout and "epoch: 1 startOffset: 102" in p.stdout
