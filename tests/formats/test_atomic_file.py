import errno
import io
import os
import threading

import pytest

from tieredlog.atomic_file import SourceTooLargeError, atomic_copy, atomic_copy_file, atomic_write
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


@pytest.mark.parametrize("refused", [(), ("copy_file_range",), ("copy_file_range", "sendfile")])
def test_copy_file_by_the_kernel_or_else_by_reads(tmp_path, monkeypatch, refused):
    # a file system the kernel cannot copy on (EXDEV, EINVAL) falls back to the next way, then to reads
    for name in refused:
        def refuse(*_args, _name=name):
            raise OSError(errno.EXDEV if _name == "copy_file_range" else errno.EINVAL, f"no {_name} here")
        monkeypatch.setattr(os, name, refuse)
    data = os.urandom((3 << 20) + 17)
    (tmp_path / "src").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    for name, expected in (("src", data), ("empty", b"")):
        with open(tmp_path / name, "rb", buffering=0) as src:
            assert atomic_copy_file(tmp_path / f"{name}.copy", src, unique_tmp=True) == len(expected)
        assert (tmp_path / f"{name}.copy").read_bytes() == expected
    assert sorted(os.listdir(tmp_path)) == ["empty", "empty.copy", "src", "src.copy"]


@pytest.mark.skipif(not os.path.exists("/proc/self/cmdline"), reason="needs procfs")
def test_copy_file_of_a_file_the_kernel_reads_as_empty(tmp_path):
    # procfs files have size 0 for the kernel's copy; their bytes come through all the same
    with open("/proc/self/cmdline", "rb") as f:
        expected = f.read()
    with open("/proc/self/cmdline", "rb", buffering=0) as src:
        assert atomic_copy_file(tmp_path / "c", src) == len(expected) > 0
    assert (tmp_path / "c").read_bytes() == expected


def test_a_failed_kernel_copy_keeps_the_old_file(tmp_path, monkeypatch):
    (tmp_path / "f").write_bytes(b"old")
    (tmp_path / "src").write_bytes(b"new")

    def broken(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", broken)
    with open(tmp_path / "src", "rb", buffering=0) as src, pytest.raises(OSError):
        atomic_copy_file(tmp_path / "f", src, unique_tmp=True)
    assert (tmp_path / "f").read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["f", "src"]


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
