"""The allowed-arrows check: every import in the tree follows the module map of docs/internals.md.

The map is the table between the ``<!-- arrows -->`` and ``<!-- /arrows -->`` markers of docs/internals.md:
each row names a layer, the modules it is made of and the layers it may import. This script reads every
module of ``tieredlog/``, ``spark_readers/`` and the plugin packages under ``plugins/`` with ``ast``, takes
every import (at module level, inside functions, under ``if TYPE_CHECKING:``: a type names the layer it
comes from like any other import; a lower layer that needs a little of a higher one declares a
``Protocol``), and fails when

- a module belongs to no layer of the map, or the map names a layer that does not exist;
- the allowed arrows themselves form a cycle;
- a module imports a layer its own layer may not import, unless the import is listed in KNOWN_DEBT;
- modules import each other in a cycle (any two modules, in one package or across packages), unless the
  cycle lies inside a package listed in KNOWN_CYCLES;
- a KNOWN_DEBT or KNOWN_CYCLES entry no longer exists: whoever removes a debt removes its entry, so the
  lists only shrink.

As the allowed arrows form no cycle, packages can import each other in a cycle only through KNOWN_DEBT;
such package-level cycles are printed on success, so the debt that keeps them is in view.

Run it from the repository root: ``python scripts/check_arrows.py`` (``make lint`` does). Exit status 1 and
one line per problem when the tree breaks the map.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping

ROOT = Path(__file__).resolve().parent.parent
MAP_FILE = Path("docs/internals.md")
MAP_BEGIN = "<!-- arrows -->"
MAP_END = "<!-- /arrows -->"

# Imports against the map that are being removed. Key: (importing module, imported module). Each entry
# names what removes it; the check fails once the import is gone, so the entry goes with it.
KNOWN_DEBT: dict[tuple[str, str], str] = {}

# Packages inside which an import cycle between modules is being removed. Key: package prefix.
KNOWN_CYCLES: dict[str, str] = {}


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # "pkg.*": the package and everything under it; "pkg.mod": that module only
    may_import: frozenset[str]


@dataclass
class ModuleMap:
    layers: dict[str, Layer] = field(default_factory=dict)

    def layer_of(self, module: str) -> str | None:
        best: tuple[int, str] | None = None
        for layer in self.layers.values():
            for spec in layer.modules:
                if spec.endswith(".*"):
                    base = spec[:-2]
                    if module == base or module.startswith(base + "."):
                        rank = 2 * len(base)
                    else:
                        continue
                elif module == spec:
                    rank = 2 * len(spec) + 1  # an exact name beats the package wildcard of the same name
                else:
                    continue
                if best is None or rank > best[0]:
                    best = (rank, layer.name)
        return None if best is None else best[1]


def parse_map(text: str) -> ModuleMap:
    """The layers of the table between the markers: | `layer` | `modules`... | `layers`... or — | prose |."""
    try:
        body = text.split(MAP_BEGIN, 1)[1].split(MAP_END, 1)[0]
    except IndexError:
        raise ValueError(f"{MAP_FILE}: no {MAP_BEGIN} ... {MAP_END} table") from None
    mm = ModuleMap()
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue  # header, separator, prose
        name = cells[0].strip("`")
        modules = tuple(re.findall(r"`([^`]+)`", cells[1]))
        may = frozenset(re.findall(r"`([^`]+)`", cells[2]))
        if name in mm.layers:
            raise ValueError(f"{MAP_FILE}: layer {name} listed twice")
        for other in mm.layers.values():
            for spec in set(modules) & set(other.modules):
                raise ValueError(f"{MAP_FILE}: {spec} is in layer {other.name} and in layer {name}")
        mm.layers[name] = Layer(name, modules, may)
    if not mm.layers:
        raise ValueError(f"{MAP_FILE}: the arrows table has no rows")
    return mm


def source_roots(root: Path) -> list[Path]:
    """Folders whose children are top-level packages: the repository, and each plugin's folder."""
    return [root] + sorted(p for p in (root / "plugins").glob("*") if p.is_dir())


def find_modules(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for base in source_roots(root):
        for pkg in sorted(base.iterdir()):
            if not (pkg / "__init__.py").is_file() or pkg.name in ("tests", "bench", "scripts"):
                continue
            for path in sorted(pkg.rglob("*.py")):
                parts = list(path.relative_to(base).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module of the tree a dotted name lives in (``pkg.mod.Class`` -> ``pkg.mod``), None outside it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(module: str, is_package: bool, tree: ast.AST, modules: Mapping[str, Path]
                     ) -> Iterator[tuple[str, int]]:
    """(module of the tree, line) of every import anywhere in ``module``: at module level, in functions,
    under ``if TYPE_CHECKING:``. ``from pkg import name`` imports the module pkg.name when there is one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                yield target, node.lineno


def import_graph(modules: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module of the tree: first line importing it}."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets: dict[str, int] = {}
        for target, line in imported_modules(module, path.name == "__init__.py", tree, modules):
            targets[target] = min(line, targets.get(target, line))
        graph[module] = targets
    return graph


def _cycles(nodes: Iterable[str], edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    debt_in_use: int = 0
    layer_cycles: list[list[str]] = field(default_factory=list)  # through debt only; informative


def check(mm: ModuleMap, graph: Mapping[str, Mapping[str, int]], debt: Mapping[tuple[str, str], str],
          known_cycles: Mapping[str, str]) -> Report:
    report = Report()
    problems = report.problems
    for layer in mm.layers.values():
        for other in sorted(layer.may_import - mm.layers.keys()):
            problems.append(f"map: layer {layer.name} may import {other}, which is not a layer")
    arrows = {name: sorted(layer.may_import & mm.layers.keys()) for name, layer in mm.layers.items()}
    for comp in _cycles(mm.layers, arrows):
        problems.append(f"map: the allowed arrows form a cycle: {' <-> '.join(comp)}")

    layer_of = {m: mm.layer_of(m) for m in graph}
    for module in sorted(graph):
        if layer_of[module] is None:
            problems.append(f"{module}: in no layer of the map ({MAP_FILE})")
    used_debt: set[tuple[str, str]] = set()
    layer_edges: dict[str, set[str]] = {}
    for module in sorted(graph):
        src = layer_of[module]
        for target, line in sorted(graph[module].items()):
            dst = layer_of.get(target)
            if src is None or dst is None or src == dst:
                continue
            layer_edges.setdefault(src, set()).add(dst)
            if dst in mm.layers[src].may_import:
                continue
            if (module, target) in debt:
                used_debt.add((module, target))
                continue
            problems.append(f"{module}:{line} imports {target}: layer {src} may not import {dst}")
    for key in sorted(debt.keys() - used_debt):
        problems.append(f"KNOWN_DEBT {key[0]} -> {key[1]} no longer exists: remove the entry")
    report.debt_in_use = len(used_debt)
    report.layer_cycles = _cycles(layer_edges, layer_edges)

    used_cycles: set[str] = set()
    for comp in _cycles(graph, graph):
        owner = next((p for p in known_cycles if all(m == p or m.startswith(p + ".") for m in comp)), None)
        if owner is None:
            problems.append(f"import cycle: {' <-> '.join(comp)}")
        else:
            used_cycles.add(owner)
    for prefix in sorted(known_cycles.keys() - used_cycles):
        problems.append(f"KNOWN_CYCLES {prefix}: no cycle left inside it: remove the entry")
    return report


def run(root: Path = ROOT) -> Report:
    mm = parse_map((root / MAP_FILE).read_text(encoding="utf-8"))
    return check(mm, import_graph(find_modules(root)), KNOWN_DEBT, KNOWN_CYCLES)


def main() -> int:
    report = run()
    for problem in report.problems:
        print(problem)
    if report.problems:
        print(f"{len(report.problems)} import(s) against the module map of {MAP_FILE}")
        return 1
    cycles = "; ".join(" <-> ".join(c) for c in report.layer_cycles) or "none"
    print(f"import arrows: ok ({report.debt_in_use} known debts; layer cycles through them: {cycles})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
