"""Shared fixtures.

- ``broker``: one broker subprocess per test module (fresh data dir); tests in the module share it,
  so use distinct topic names.
- ``broker_factory``: ``broker_factory(overrides={...}, data_dir=None, extra_listeners=None)`` starts a
  broker for one test (``extra_listeners={"SSL": port}`` binds more listeners beside the PLAINTEXT one
  it waits on); every broker it started is stopped when the test ends.
- Tests using a fixture that starts a process (``PROCESS_FIXTURES``) are marked ``integration``.
See tests/harness/broker_harness.py for the BrokerProcess API (bootstrap, restart, kill9, stop, log_text).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

# Every folder of tests/ is on sys.path, so a harness (tests/harness/) is imported by its file name,
# `from broker_harness import BrokerProcess`, wherever the importer lives; pytest imports the test modules
# themselves the same way (its default "prepend" mode), which is why file names are unique across the
# folders. A test module imports harnesses, never another test module (tests/docs/test_import_arrows.py).
TESTS = Path(__file__).resolve().parent
for _folder in sorted((p for p in TESTS.iterdir() if p.is_dir() and p.name.isidentifier() and p.name[0] != "_"),
                      reverse=True):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# Helpers the test modules share live in tests/harness/; their asserts are rewritten as a test module's are,
# so a failing one shows its values.
pytest.register_assert_rewrite(*sorted(p.stem for p in (TESTS / "harness").glob("*.py") if not p.stem.startswith("test_")))

from broker_harness import BrokerProcess  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests are seeded: a run replays exactly (a failure in CI reproduces on a laptop), and no
# example database is kept between runs. HYPOTHESIS_PROFILE=explore searches afresh each run.
settings.register_profile("seeded", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seeded"))


def pytest_configure(config: pytest.Config) -> None:
    # Hundreds of logs, sockets and clients are opened over the whole run; a machine whose soft
    # descriptor limit is the common 1024 would fail late in the suite for no reason of the code's.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


# Fixtures that start a real process or server: a test using one is an integration test, so
# `pytest -m "not integration"` is the quick unit run without anyone having to remember the mark.
PROCESS_FIXTURES = frozenset(
    {"broker", "broker_factory", "moto_s3", "seaweed_s3", "any_s3", "no_docker_server", "zookeeper"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _release_logs_left_open(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Release the descriptors of the logs a test made under its own ``tmp_path`` and left open.

    Many unit tests end without closing their logs (a crash is their point, or the test simply stops),
    and a segment holds raw descriptors that no garbage collection closes. Over the whole run they
    added up past 1,024 in the test process, where py4j's callback server (Spark's foreachBatch)
    watches its socket with select(), which cannot see a descriptor that high: every streaming test
    after that point hung. The logs are only released (close_handles: nothing is written)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    from tieredlog.log.unified_log import UnifiedLog

    root = request.getfixturevalue("tmp_path")  # asked now: it is torn down after this fixture
    made: list[UnifiedLog] = []
    init = UnifiedLog.__init__

    def recording_init(self: UnifiedLog, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(UnifiedLog, "__init__", recording_init)
    yield
    for plog in made:
        if plog.dir.is_relative_to(root):
            try:
                plog.close_handles()
            except OSError:
                pass


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, data_dir: Path | None = None, start: bool = True,
             extra_listeners: dict[str, int] | None = None) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"data{len(started)}", overrides, extra_listeners=extra_listeners)
        started.append(b)
        return b.start() if start else b

    yield make
    for b in started:
        b.stop()
