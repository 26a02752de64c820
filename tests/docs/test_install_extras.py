"""Each documented install, in a fresh virtualenv, imports and runs what the docs say it does.

The project and its plugin are built as wheels (from a copy of the sources, so no build/ or egg-info is
left in the checkout) and installed with their declared dependencies only, through pip as this machine
configures it. One virtualenv, in steps, each step checked before the next adds to it:

1. ``pip install tieredlog tieredlog-chunked``: the broker's CLI, ``tieredlog export`` run on a real
   tiered segment, the ``tieredlog.remote_storage`` entry points (the plugin's among them), and the one-line
   error naming the ``spark`` extra where the brokers would be needed; PySpark is not there.
2. ``pip install 'tieredlog[spark]'`` added: the data source, its stream reader and writer, confluent-kafka.

The base step is the slow one (pyarrow, botocore); adding the extra reuses it rather than installing the
base a second time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import pytest
from spark_harness import TOPIC, write_segment

from tieredlog.rsm.api import TopicIdPartition
from tieredlog.rsm.local import LocalTieredStorage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "tieredlog-chunked"
SOURCES = ("pyproject.toml", "README.md", "tieredlog", "spark_readers")
PLUGIN_SOURCES = ("pyproject.toml", "README.md", "tieredlog_chunked")


# what the virtualenv's programs see: nothing of this checkout through PYTHONPATH
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=CLEAN_ENV)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def copy_sources(src: Path, names: tuple[str, ...], dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    dest.mkdir()
    for name in names:
        if (src / name).is_dir():
            shutil.copytree(src / name, dest / name, ignore=ignore)
        else:
            shutil.copy(src / name, dest / name)
    return dest


class Venv:
    """A virtualenv without pip of its own: this interpreter's pip installs into it (``pip --python``),
    which saves bootstrapping and upgrading one per run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.python = path / "bin" / "python"

    def pip(self, *args: str | Path) -> str:
        # --no-compile: byte-compiling pyarrow, botocore and pyspark whole would take most of the time
        return run(sys.executable, "-m", "pip", "--python", self.python, "-q", *args)

    def py(self, code: str) -> str:
        # -I: nothing from this checkout or PYTHONPATH, only what the virtualenv installed
        return run(self.python, "-I", "-c", code)

    def fails(self, code: str) -> str:
        done = subprocess.run([str(self.python), "-I", "-c", code], capture_output=True, text=True, env=CLEAN_ENV)
        assert done.returncode != 0, done.stdout
        return done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("wheels")
    project = copy_sources(ROOT, SOURCES, work / "tieredlog")
    plugin = copy_sources(PLUGIN, PLUGIN_SOURCES, work / "tieredlog-chunked")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", work / "dist", project, plugin)
    wheel = next((work / "dist").glob("tieredlog-*.whl"))
    plugin_wheel = next((work / "dist").glob("tieredlog_chunked-*.whl"))
    return wheel, plugin_wheel


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, built: tuple[Path, Path]) -> Iterator[Venv]:
    path = tmp_path_factory.mktemp("venv") / "v"
    run(sys.executable, "-m", "venv", "--without-pip", path)
    v = Venv(path)
    v.pip("install", "--no-compile", *built)
    yield v
    shutil.rmtree(path, ignore_errors=True)


def test_the_base_install_runs_the_broker_cli_export_and_the_plugin(venv: Venv, tmp_path: Path) -> None:
    tieredlog = venv.path / "bin" / "tieredlog"
    assert venv.py("import tieredlog; print(tieredlog.__file__)").startswith(str(venv.path))
    assert "broker" in run(tieredlog, "--help")
    assert "--topic" in run(tieredlog, "export", "--help")
    assert "--override" in run(tieredlog, "broker", "--help")
    venv.fails("import pyspark")  # what follows ran without it

    # export, as a user runs it, on a segment the broker's LocalTieredStorage tiered
    remote = tmp_path / "remote"
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    written = write_segment(tmp_path, LocalTieredStorage(remote), tp, [(0, 0)], 0, 40)
    out = tmp_path / "out"
    run(tieredlog, "export", "--topic", TOPIC, "--path", remote.as_uri(), "--to", out, cwd=tmp_path)
    table = pq.read_table(out / f"{TOPIC}-0.parquet")
    assert table.column("offset").to_pylist() == sorted(written.records)
    assert table.column("value").to_pylist() == [written.records[o][1] for o in sorted(written.records)]

    found = venv.py(
        "from importlib.metadata import entry_points\n"
        "for e in sorted(entry_points(group='tieredlog.remote_storage'), key=lambda e: e.name):\n"
        "    c = e.load(); print(e.name, c.__module__ + '.' + c.__name__)\n")
    assert found.splitlines() == [
        "chunked tieredlog_chunked.rsm.ChunkedRemoteStorageManager",
        "fsspec tieredlog.rsm.fsspec_rsm.FsspecRemoteStorageManager",
        "local tieredlog.rsm.local.LocalTieredStorage",
        "s3 tieredlog.rsm.s3.S3RemoteStorageManager",
    ]

    # reading the brokers' tail needs the extra; the error says which, in one line
    err = venv.fails("from spark_readers.brokers import Brokers\nBrokers({}, False, 1.0)")
    last = err.strip().splitlines()[-1]
    assert last == ("ModuleNotFoundError: reading from or writing to the brokers (kafka.bootstrap.servers) "
                    "needs confluent-kafka: pip install 'tieredlog[spark]'")
    venv.pip("check")


def test_the_spark_extra_imports_the_data_source(venv: Venv, built: tuple[Path, Path]) -> None:
    wheel, _ = built
    venv.pip("install", "--no-compile", f"{wheel}[spark]")
    assert venv.py(
        "from spark_readers import TieredLogDataSource\n"
        "import spark_readers.stream, spark_readers.writer\n"
        "from spark_readers.brokers import require_confluent_kafka\n"
        "require_confluent_kafka()\n"
        "print(TieredLogDataSource.name())\n").strip() == "tieredlog"
    venv.pip("check")
