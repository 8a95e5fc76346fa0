"""The layout DESIGN.md draws, checked on the source: every import of every module
of the five packages (top level, inside functions, under TYPE_CHECKING, relative
ones resolved) goes one way, and modules and folders stay small.

An import of a package is an import of its `__init__`, except that a name the
`__init__` only re-exports counts as an import of the module that defines it: a
package that gathers its own submodules is not a circle with them."""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler", "traces", "sim", "live", "analysis")
LIVE_LAYERS = ("live.runner", "live.engine", "live.streams", "live.server")
"""Lowest first: a module of a layer may import its own layer and those below."""
MAX_MODULE_LINES = 400
MAX_MODULES_IN_FOLDER = 15


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    plain_imports: set[str] = field(default_factory=set)
    """The modules of each `import module`."""
    from_imports: list[tuple[str, str, str]] = field(default_factory=list)
    """(module, name, the name it is bound to) for each `from module import name`,
    relative ones resolved."""

    @property
    def imports(self) -> set[str]:
        """Every module an import names, ours or not."""
        return self.plain_imports | {source for source, _, _ in self.from_imports}

    @property
    def package(self) -> str:
        """The package its relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def load_modules() -> dict[str, Module]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = Module(module_name(path), path, path.name == "__init__.py")
            read_imports(module)
            modules[module.name] = module
    return modules


def read_imports(module: Module) -> None:
    tree = ast.parse(module.path.read_text(), str(module.path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            module.plain_imports.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(module, node.module, node.level)
            module.from_imports += [(base, alias.name, alias.asname or alias.name)
                                    for alias in node.names]


def resolve(module: Module, name: str | None, level: int) -> str:
    if not level:
        return name
    package = module.package.split(".")
    if level - 1 > len(package) - 1:
        raise AssertionError(f"{module.name}: a relative import goes above its top package")
    base = package[:len(package) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def is_ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def top(name: str) -> str:
    return name.split(".")[0]


def reexports(modules: dict[str, Module]) -> dict[str, dict[str, tuple[str, str]]]:
    """For each package, the names its `__init__` imports from our modules: the
    name it binds -> (the module it comes from, its name there)."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for module in modules.values():
        if module.is_package:
            found[module.name] = {bound: (source, name)
                                  for source, name, bound in module.from_imports
                                  if source in modules}
    return found


def target(modules: dict[str, Module], exported: dict[str, dict[str, tuple[str, str]]],
           source: str, name: str) -> str:
    """The module `from source import name` depends on: the submodule `name`, or the
    module a package's `__init__` re-exports `name` from, or `source` itself."""
    seen = set()
    while (source, name) not in seen:
        seen.add((source, name))
        if f"{source}.{name}" in modules:
            return f"{source}.{name}"
        if name not in exported.get(source, {}):
            return source
        source, name = exported[source][name]
    return source


def dependencies(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Module -> the modules of ours it depends on."""
    exported = reexports(modules)
    graph: dict[str, set[str]] = {}
    for module in modules.values():
        edges = {name for name in module.plain_imports if name in modules}
        edges.update(target(modules, exported, source, name)
                     for source, name, _ in module.from_imports if source in modules)
        edges.discard(module.name)
        graph[module.name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def is_stdlib(name: str) -> bool:
    return top(name) in sys.stdlib_module_names


def layer(name: str) -> int | None:
    for rank, prefix in enumerate(LIVE_LAYERS):
        if name == prefix or name.startswith(prefix + "."):
            return rank
    return None


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


MODULES = load_modules()
GRAPH = dependencies(MODULES)


def imports_of(package: str):
    """(module, imported name) for every import of the modules of `package`."""
    return [(m.name, name) for m in MODULES.values() if in_package(m.name, package)
            for name in sorted(m.imports)]


def test_the_modules_are_found():
    assert {top(name) for name in MODULES} == set(PACKAGES)
    assert "scheduler.core" in GRAPH and "scheduler.block_pool" in GRAPH["scheduler.core"]


def made_up(name: str, *imports: tuple[str, str], package: bool = False) -> Module:
    """A module with the given `from source import name` imports, read from nowhere."""
    return Module(name, Path(name), package, from_imports=[(s, n, n) for s, n in imports])


def graph_of(*modules: Module) -> dict[str, set[str]]:
    return dependencies({m.name: m for m in modules})


def test_relative_imports_resolve_from_the_package():
    hub = Module("sim.serving.hub", Path("sim/serving/hub.py"), False)
    package = Module("sim.serving", Path("sim/serving/__init__.py"), True)
    assert resolve(hub, "overheads", 2) == "sim.overheads"
    assert resolve(hub, "connection", 1) == "sim.serving.connection"
    assert resolve(package, "connection", 1) == "sim.serving.connection"
    assert resolve(hub, None, 2) == "sim"


def test_a_name_a_package_reexports_is_an_import_of_the_module_that_defines_it():
    # p gathers A from p.a and B from p.b; p.a takes B through the package
    gathers = made_up("p", ("p.a", "A"), ("p.b", "B"), package=True)
    takes_b = made_up("p.a", ("p", "B"))
    assert graph_of(gathers, takes_b, made_up("p.b"))["p.a"] == {"p.b"}
    assert circles(graph_of(gathers, takes_b, made_up("p.b"))) == []
    assert circles(graph_of(gathers, takes_b, made_up("p.b", ("p", "A")))) == [["p.a", "p.b"]]
    # a name the package defines itself is an import of its __init__, which imports p.a
    assert circles(graph_of(gathers, made_up("p.a", ("p", "C")), made_up("p.b"))) == [["p", "p.a"]]


def test_no_import_circle_between_modules():
    found = circles(GRAPH)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_scheduler_imports_the_standard_library_only():
    bad = [f"{m} imports {name}" for m, name in imports_of("scheduler")
           if not is_stdlib(name) and top(name) != "scheduler"]
    assert not bad, bad


def test_traces_import_the_standard_library_numpy_and_pyarrow_only():
    # pyarrow for the per-request records on disk (Parquet), read by analysis tools
    bad = [f"{m} imports {name}" for m, name in imports_of("traces")
           if not is_stdlib(name) and top(name) not in ("traces", "numpy", "pyarrow")]
    assert not bad, bad


@pytest.mark.parametrize("package, forbidden", [("sim", "live"), ("live", "sim")])
def test_sim_and_live_never_import_each_other(package, forbidden):
    bad = [f"{m} imports {name}" for m, name in imports_of(package) if top(name) == forbidden]
    assert not bad, bad


def test_nothing_imports_analysis():
    bad = [f"{m.name} imports {name}" for m in MODULES.values() if top(m.name) != "analysis"
           for name in sorted(m.imports) if top(name) == "analysis"]
    assert not bad, bad


def test_live_layers_point_down():
    bad = []
    for m in MODULES.values():
        own = layer(m.name)
        if own is None:
            continue
        for name in sorted(GRAPH[m.name] | {n for n in m.imports if is_ours(n)}):
            other = layer(name)
            if other is not None and other > own:
                bad.append(f"{m.name} imports {name}, a higher layer")
            elif in_package(name, "live.client"):
                bad.append(f"{m.name} imports {name}, the load generator")
    assert not bad, bad


def test_the_load_generator_imports_only_traces_and_itself():
    bad = [f"{m} imports {name}" for m, name in imports_of("live.client")
           if is_ours(name) and not in_package(name, "traces")
           and not in_package(name, "live.client")]
    assert not bad, bad


def test_no_product_module_is_over_the_line_limit():
    long = {m.name: n for m in MODULES.values()
            if (n := len(m.path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_package_folder_holds_too_many_modules():
    folders: dict[Path, int] = {}
    for m in MODULES.values():
        if not m.is_package:  # an `__init__` is the package itself, not a module in it
            folders[m.path.parent] = folders.get(m.path.parent, 0) + 1
    crowded = {str(folder.relative_to(ROOT)): n for folder, n in folders.items()
               if n > MAX_MODULES_IN_FOLDER}
    assert not crowded, f"folders with more than {MAX_MODULES_IN_FOLDER} modules: {crowded}"
