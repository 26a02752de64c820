"""The allowed-arrows check (scripts/check_arrows.py): the tree follows the module map of docs/internals.md,
and the check itself catches what it is there to catch."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_arrows", ROOT / "scripts" / "check_arrows.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


arrows = _load()


@pytest.fixture(scope="module")
def module_map():  # the real table
    return arrows.parse_map((ROOT / arrows.MAP_FILE).read_text(encoding="utf-8"))


def test_the_tree_follows_the_module_map() -> None:
    report = arrows.run(ROOT)
    assert report.problems == []


def test_only_the_wiring_names_the_broker() -> None:
    """Handlers and helpers declare the Protocol of the broker they use: the Broker class is named only
    where it is built and held to those Protocols (an import that makes no cycle is still a locator)."""
    graph = arrows.import_graph(arrows.find_modules(ROOT))
    importers = {m for m, targets in graph.items() if "tieredlog.server.broker" in targets}
    assert importers <= {"tieredlog.server.main", "tieredlog.server.dispatcher"}


def test_no_test_module_is_imported_by_another_module() -> None:
    """What test modules share lives in tests/harness/, so each test module stands alone: it can be moved,
    split or deleted without breaking another one."""
    tests = ROOT / "tests"
    test_modules = {p.stem for p in tests.rglob("test_*.py")}
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in test_modules]
    assert found == []


def test_an_import_against_the_map_fails(module_map) -> None:
    graph = {"tieredlog.log.segment": {"tieredlog.server.broker": 12}, "tieredlog.server.broker": {}}
    report = arrows.check(module_map, graph, {}, {})
    assert report.problems == [
        "tieredlog.log.segment:12 imports tieredlog.server.broker: layer log may not import server"]
    # the same import the other way round is an allowed arrow
    graph = {"tieredlog.server.broker": {"tieredlog.log.segment": 3}, "tieredlog.log.segment": {}}
    assert arrows.check(module_map, graph, {}, {}).problems == []


def test_the_rsm_contract_is_all_a_plugin_or_the_spark_reader_may_see(module_map) -> None:
    assert module_map.layer_of("tieredlog.rsm") == "rsm"
    assert module_map.layer_of("tieredlog.rsm.api") == "rsm"
    assert module_map.layer_of("tieredlog.rsm.s3") == "rsm_backends"
    assert module_map.layer_of("tieredlog.security.authorizer.zk_store") == "authorizer"
    assert module_map.layer_of("tieredlog.security.sasl.client") == "security"
    assert module_map.layer_of("tieredlog.newpackage.thing") is None  # the package root is no wildcard
    graph = {"spark_readers.storage": {"tieredlog.rsm.s3": 5, "tieredlog.rsm.registry": 6},
             "tieredlog.rsm.s3": {}, "tieredlog.rsm.registry": {}}
    assert arrows.check(module_map, graph, {}, {}).problems == [
        "spark_readers.storage:5 imports tieredlog.rsm.s3: layer spark_readers may not import rsm_backends"]


def test_function_level_type_checking_and_relative_imports_all_count() -> None:
    source = textwrap.dedent("""
        from typing import TYPE_CHECKING
        from . import unified_log
        from ..records import batch
        import tieredlog.rlm.manager
        if TYPE_CHECKING:
            from tieredlog.server.broker import Broker
        def f():
            from tieredlog.replication import partition
        class C:
            def g(self):
                import tieredlog.server.context as ctx
    """)
    modules = dict.fromkeys(["tieredlog.log", "tieredlog.log.segment", "tieredlog.log.unified_log",
                             "tieredlog.records", "tieredlog.records.batch", "tieredlog.rlm.manager",
                             "tieredlog.server.broker", "tieredlog.replication", "tieredlog.replication.partition",
                             "tieredlog.server.context"], Path("x.py"))
    found = dict(arrows.imported_modules("tieredlog.log.segment", False, ast.parse(source), modules))
    assert found == {"tieredlog.log.unified_log": 3, "tieredlog.records.batch": 4, "tieredlog.rlm.manager": 5,
                     "tieredlog.server.broker": 7, "tieredlog.replication.partition": 9,
                     "tieredlog.server.context": 12}


def test_known_debt_passes_and_must_shrink(module_map) -> None:
    graph = {"tieredlog.log.segment": {"tieredlog.rlm.manager": 1}, "tieredlog.rlm.manager": {}}
    debt = {("tieredlog.log.segment", "tieredlog.rlm.manager"): "being moved"}
    report = arrows.check(module_map, graph, debt, {})
    assert report.problems == [] and report.debt_in_use == 1
    gone = {"tieredlog.log.segment": {}, "tieredlog.rlm.manager": {}}
    assert arrows.check(module_map, gone, debt, {}).problems == [
        "KNOWN_DEBT tieredlog.log.segment -> tieredlog.rlm.manager no longer exists: remove the entry"]


def test_import_cycles_fail_unless_known_and_known_ones_must_shrink(module_map) -> None:
    graph = {"tieredlog.log.a": {"tieredlog.log.b": 1}, "tieredlog.log.b": {"tieredlog.log.c": 1},
             "tieredlog.log.c": {"tieredlog.log.a": 1}, "tieredlog.log.d": {"tieredlog.log.a": 1}}
    assert arrows.check(module_map, graph, {}, {}).problems == [
        "import cycle: tieredlog.log.a <-> tieredlog.log.b <-> tieredlog.log.c"]
    assert arrows.check(module_map, graph, {}, {"tieredlog.log": "being split"}).problems == []
    acyclic = {"tieredlog.log.a": {"tieredlog.log.b": 1}, "tieredlog.log.b": {}}
    assert arrows.check(module_map, acyclic, {}, {"tieredlog.log": "being split"}).problems == [
        "KNOWN_CYCLES tieredlog.log: no cycle left inside it: remove the entry"]


def test_a_map_that_is_cyclic_or_incomplete_fails() -> None:
    table = textwrap.dedent(f"""
        {arrows.MAP_BEGIN}
        | Layer | Modules | May import | Owns |
        |---|---|---|---|
        | `low` | `pkg.low.*` | `high` | - |
        | `high` | `pkg.high.*` | `low`, `nowhere` | - |
        {arrows.MAP_END}
    """)
    mm = arrows.parse_map(table)
    problems = arrows.check(mm, {"pkg.low.x": {}, "pkg.other": {}}, {}, {}).problems
    assert problems == ["map: layer high may import nowhere, which is not a layer",
                        "map: the allowed arrows form a cycle: high <-> low",
                        "pkg.other: in no layer of the map (docs/internals.md)"]


def test_a_module_in_two_layers_is_refused() -> None:
    table = f"{arrows.MAP_BEGIN}\n| `a` | `pkg.x.*` | — | - |\n| `b` | `pkg.x.*` | — | - |\n{arrows.MAP_END}\n"
    with pytest.raises(ValueError, match=r"pkg.x.\* is in layer a and in layer b"):
        arrows.parse_map(table)
