"""The house's layout, checked on the code itself (read with `ast`, nothing imported):

- no import cycle among the project's modules;
- imports flow one way: `mcp_server` -> `training` -> (`episodes`, `envpool`, `memory`);
  `mcp_server` may use `episodes` directly; `episodes`, `envpool` and `memory` import none of the
  others; `common` (helpers with no domain knowledge) imports none of them and any may import it;
  nothing imports `mcp_server`;
- every package says in its `__init__.py` docstring what lives there, and no folder holds more
  than `MAX_MODULES` modules, so the folder tree alone tells a newcomer where a thing lives.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mcp_server", "training", "episodes", "envpool", "memory", "common")
ALLOWED: dict[str, frozenset[str]] = {
    "mcp_server": frozenset({"training", "episodes", "envpool", "memory", "common"}),
    "training": frozenset({"episodes", "envpool", "memory", "common"}),
    "episodes": frozenset({"common"}),
    "envpool": frozenset({"common"}),
    "memory": frozenset({"common"}),
    "common": frozenset(),
}
MAX_MODULES = 12


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    return {
        module_name(root, path): path
        for package in packages
        if (root / package).is_dir()
        for path in sorted((root / package).rglob("*.py"))
    }


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its body (lazy imports count: they run too).
    `from package import x` is an import of module `package.x` when that is a module, else of
    `package`; relative imports are resolved against the module's package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        candidates: list[str] = []
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in candidates:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = project_modules(root, packages)
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for source, targets in sorted(graph.items()):
        top = source.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != top and other not in ALLOWED[top]:
                problems.append(f"{source} -> {target}")
    return problems


def test_the_project_has_no_import_cycle() -> None:
    assert cycles(import_graph(ROOT)) == []


def test_imports_flow_one_way() -> None:
    graph = import_graph(ROOT)
    assert {name.split(".")[0] for name in graph} == set(PACKAGES)
    assert wrong_way_imports(graph) == []


def test_the_checks_find_cycles_and_wrong_way_imports(tmp_path: Path) -> None:
    """The checker itself, on a planted tree: a cycle through a lazy and a relative import, a
    `from package import module` edge, and imports against the direction."""
    files = {
        "training/__init__.py": '"""t"""',
        "training/data/__init__.py": "",
        "training/data/export.py": "def f():\n    from training.data import groups\n",
        "training/data/groups.py": "from .export import f\n",
        "training/worker.py": "from mcp_server.cli import main\nimport training.data.groups\n",
        "episodes/__init__.py": "",
        "episodes/store.py": "from training.worker import x\nfrom common.sqlite_wal import open_wal\n",
        "common/__init__.py": "",
        "common/sqlite_wal.py": "from episodes import store\n",
        "mcp_server/__init__.py": "",
        "mcp_server/cli.py": "import episodes.store\nfrom training.data.export import f\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["training.data.export"] == {"training.data.groups"}
    assert graph["training.data.groups"] == {"training.data.export"}
    assert sorted(cycles(graph)) == [
        ["common.sqlite_wal", "episodes.store", "mcp_server.cli", "training.worker"],
        ["training.data.export", "training.data.groups"],
    ]
    assert wrong_way_imports(graph) == [
        "common.sqlite_wal -> episodes.store",
        "episodes.store -> training.worker",
        "training.worker -> mcp_server.cli",
    ]


def test_every_package_says_what_lives_there_and_no_folder_is_crowded() -> None:
    crowded, silent = [], []
    for package in PACKAGES:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            folder = init.parent
            if not ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))):
                silent.append(str(folder.relative_to(ROOT)))
            modules = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
            if len(modules) > MAX_MODULES:
                crowded.append(f"{folder.relative_to(ROOT)}: {len(modules)} modules")
    assert silent == []
    assert crowded == []
