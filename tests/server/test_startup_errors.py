"""A broker that cannot use its log dirs or its listener's address stops with exit code 1 and one line
naming the setting and its value, before it writes anything to its log dirs.

Run as a user runs it (``python -m tieredlog.cli broker --override ...``). The read-only and full log
dirs are real file systems: a tmpfs mounted read-only, and a tiny tmpfs filled up (root passes
permission bits, so chmod would prove nothing). Where mounting is not allowed (not root), the read-only
case uses /sys, which root cannot write either, and the full-disk case cannot be made.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.integration

PREFIX = "ERROR tieredlog.broker: cannot start: "


def start_broker(*overrides: str) -> str:
    """The broker's one stderr line, without its timestamp; it must have exited 1."""
    args = [sys.executable, "-m", "tieredlog.cli", "broker"]
    for o in ("listeners=PLAINTEXT://127.0.0.1:0", *overrides):
        args += ["--override", o]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = [l for l in done.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, done.stderr
    assert PREFIX in lines[0], lines[0]
    return lines[0].split(PREFIX, 1)[1]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[object]:
    """``mount(name, options)``: a tmpfs at tmp_path/name, unmounted after the test; None when this
    user may not mount."""
    mounted: list[Path] = []

    def do(name: str, options: str) -> Path | None:
        point = tmp_path / name
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            return None
        mounted.append(point)
        return point

    yield do
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_log_dir_that_cannot_be_created(tmp_path: Path) -> None:
    assert start_broker("log.dirs=/proc/nope") == (
        "log.dirs=/proc/nope: Failed to create or validate data directory /proc/nope: cannot create it: "
        "No such file or directory")
    # the first usable, the second not: nothing is written to the first either
    good = tmp_path / "good"
    assert start_broker(f"log.dirs={good},/proc/nope").startswith(f"log.dirs={good},/proc/nope: ")
    assert list(good.iterdir()) == []


def test_a_log_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "data"
    f.write_text("not a directory")
    assert start_broker(f"log.dir={f}") == (
        f"log.dir={f}: Failed to create or validate data directory {f}: {f} is not a readable log directory.")
    assert f.read_text() == "not a directory"


def test_a_read_only_log_dir(mount) -> None:
    ro = mount("ro", "ro,size=1m")
    if ro is None:  # no mount rights: /sys is not writable by root either
        ro = Path("/sys/kernel")
        reason = "Permission denied"
    else:
        reason = "Read-only file system"
    assert start_broker(f"log.dirs={ro}") == (
        f"log.dirs={ro}: Failed to create or validate data directory {ro}: cannot write to it: {reason}")


def test_a_log_dir_on_a_full_disk(mount) -> None:
    full = mount("full", "size=64k")
    if full is None:
        pytest.skip("a full file system needs a tmpfs mount, which this user may not make")
    with open(full / "filler", "wb", buffering=0) as f:
        with pytest.raises(OSError, match="No space left"):
            for _ in range(1000):
                f.write(b"\0" * 4096)
    before = sorted(p.name for p in full.iterdir())
    assert start_broker(f"log.dirs={full}") == (
        f"log.dirs={full}: Failed to create or validate data directory {full}: cannot write to it: "
        "No space left on device")
    assert sorted(p.name for p in full.iterdir()) == before


def test_a_listener_address_in_use(tmp_path: Path) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        line = start_broker(f"log.dirs={data}", f"listeners=PLAINTEXT://127.0.0.1:{port}")
        assert line == (f"listeners=PLAINTEXT://127.0.0.1:{port}: Socket server failed to bind to "
                        f"127.0.0.1:{port}: Address already in use.")
        # checked before the internal topics, meta.properties or any checkpoint were written
        assert list(data.iterdir()) == []
    finally:
        taken.close()
