import io
import os
import threading

import pytest

from tieredlog.atomic_file import SourceTooLargeError, atomic_copy, atomic_write
from tieredlog.rlmm.snapshot import read_snapshot_body, snapshot_path, write_snapshot


def test_atomic_write_replaces_and_leaves_nothing_behind(tmp_path):
    p = tmp_path / "f"
    atomic_write(p, b"one")
    atomic_write(p, b"two", sync=False)
    assert p.read_bytes() == b"two" and os.listdir(tmp_path) == ["f"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    p = tmp_path / "f"
    atomic_write(p, b"old")

    class Broken(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_copy(p, Broken())
    with pytest.raises(SourceTooLargeError):
        atomic_copy(p, io.BytesIO(b"x" * 3_000_000), max_bytes=2_000_000, unique_tmp=True)
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["f"]


def test_copy_streams_and_counts(tmp_path):
    data = os.urandom(3 << 20)
    assert atomic_copy(tmp_path / "f", io.BytesIO(data), unique_tmp=True, max_bytes=len(data)) == len(data)
    assert (tmp_path / "f").read_bytes() == data


def test_concurrent_rlmm_snapshots_of_one_partition_never_tear(tmp_path):
    # The partition's loader and the periodic snapshot thread may write the same snapshot at once.
    bodies = [{"metadata_partition": 0, "num_partitions": 1, "next_offset": i, "partitions": [], "pad": "x" * 50_000}
              for i in range(2)]
    errors = []

    def writer(body):
        try:
            for _ in range(30):
                write_snapshot(tmp_path, body)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_snapshot_body(snapshot_path(tmp_path, 0))["next_offset"] in (0, 1)
    assert os.listdir(tmp_path) == [snapshot_path(tmp_path, 0).name]
