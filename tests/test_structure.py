"""The shape of the engine: no import cycle, small modules, a worker that needs nothing else."""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.isolation.sandbox import worker_runtime

GRADER = Path(__file__).resolve().parent.parent / "grader"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for path in GRADER.rglob("*.py"):
        parts = path.relative_to(GRADER.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
            if module in known:
                found.add(module)
            for alias in node.names:
                if f"{module}.{alias.name}" in known:
                    found.add(f"{module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
    found.discard(name)
    return found


def test_the_grader_has_no_import_cycle():
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for dep in graph[node]:
            if dep in path:
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif len(path) < 40:
                visit(dep, path + [dep])

    for name in graph:
        visit(name, [name])
    assert not cycles, sorted(set(cycles))[:5]


def test_no_module_is_over_the_line_limit():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_reports_and_readmes_do_not_import_the_engine():
    known = _modules()
    for name in ("grader.report.data", "grader.report.junit", "grader.report.text", "grader.course.readme", "grader.engine.plan"):
        assert "grader.engine.grade" not in _imports(name, known[name], known), name


def test_the_worker_package_imports_alone():
    """What the sandbox copies (the worker package and the package marker) is all the worker
    needs: it imports with nothing else of the grader on the path."""
    root = worker_runtime()
    assert sorted(p.name for p in (root / "grader").iterdir()) == ["__init__.py", "__pycache__", "worker"]
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "import grader.worker.main, grader.worker.protocol, grader.worker.confine\n"
            "assert not [m for m in sys.modules if m.startswith('grader.') and not m.startswith('grader.worker')], sys.modules\n"
            "print(grader.worker.main.__file__)")
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-I", "-c", code, str(root)], capture_output=True, text=True, cwd=cwd,
                              timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(root))


def test_a_worker_starts_from_the_copy_s_own_bytecode():
    """The copy is compiled once, as it is made: a worker (which cannot write into it) loads every
    module of the package from there and compiles none of them itself."""
    root = worker_runtime()
    sources = sorted((root / "grader").rglob("*.py"))
    assert len(sources) > 5
    code = "import sys; sys.path.insert(0, sys.argv[1]); import grader.worker.main"
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-I", "-v", "-c", code, str(root)], capture_output=True, text=True,
                              cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    loaded = {line.split(" matches ")[-1].strip() for line in lines if " matches " in line}
    compiled = {line.removeprefix("# code object from ").strip() for line in lines if line.startswith("# code object from ")}
    assert {str(root / "grader" / "worker" / "main.py"), str(root / "grader" / "__init__.py")} <= loaded, "not read from the copy's bytecode"
    assert [str(m) for m in sources if str(m) in compiled] == [], "compiled by the worker as it started"


def test_every_module_the_architecture_map_names_exists():
    import re

    root = GRADER.parent
    text = (root / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(grader/[\w/]+\.py)`", text))
    assert len(named) > 40, "the map names the modules of every stage"
    assert sorted(n for n in named if not (root / n).is_file()) == []


#: The layers, lowest first: a module imports from its own layer and those below it, never above.
#: Shared basics and the worker (which runs alone in the sandbox) are at the bottom; the command line on top.
#: Safe file access (``grader.host.safeio``, which needs only ``grader.errors``) is a shared basic: the lab
#: loader reads lab.yaml through its capped reader. So is the run's context (``grader.context``): the
#: labs search, the GPU's turns and the secret are read from the lab loader up.
LAYERS = (
    ("grader", "grader.errors", "grader.outcome", "grader.textutil", "grader.cachedirs", "grader.worker",
     "grader.host.safeio", "grader.context"),
    ("grader.labspec",),
    ("grader.host",),
    ("grader.gitread",),
    ("grader.isolation",),
    ("grader.checks",),
    ("grader.engine",),
    ("grader.report",),
    ("grader.course",),
    ("grader.gradebook",),
    ("grader.classroom",),
    ("grader.cli", "grader.cliparser", "grader.completion", "grader.__main__"),
)


def _layer(module: str) -> int:
    best, found = -1, -1
    for k, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), k
    assert found >= 0, f"{module} is in no layer: add its folder to LAYERS"
    return found


def test_imports_run_one_way_down_the_layers():
    known = _modules()
    upward = sorted(f"{name} (layer {_layer(name)}) imports {dep} (layer {_layer(dep)})"
                    for name, path in known.items() for dep in _imports(name, path, known) if _layer(dep) > _layer(name))
    assert not upward, upward


def test_each_folder_holds_one_concept_of_a_dozen_modules_at_most():
    folders = {p.parent for p in GRADER.rglob("*.py")}
    sizes = {str(f.relative_to(GRADER.parent)): sum(1 for p in f.glob("*.py") if p.name != "__init__.py") for f in folders}
    assert all(n <= 12 for name, n in sizes.items() if name != "grader"), sizes
    assert all((f / "__init__.py").read_text().startswith('"""') for f in folders if f != GRADER), "each folder says what it holds"


def test_the_architecture_map_names_every_registered_check_family():
    """Each family is found through the one registry, the map names its module, and the families'
    folder holds nothing else but the protocol, the registry and their shared text."""
    from grader.checks.families.registry import FAMILIES

    text = (GRADER.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    modules = {type(f).__module__ for f in FAMILIES}
    for module in sorted(modules):
        assert f"`{module.replace('.', '/')}.py`" in text, module
    folder = GRADER / "checks" / "families"
    here = {f"grader.checks.families.{p.stem}" for p in folder.glob("*.py")} - {
        "grader.checks.families.__init__", "grader.checks.families.base", "grader.checks.families.registry",
        "grader.checks.families.text"}
    assert here == modules, "a module in grader/checks/families/ is a registered family"
    assert len({f.name for f in FAMILIES}) == len(FAMILIES), "each family has a name of its own"


#: The tool families' own modules: the engine reaches them only through the registry.
TOOL_FAMILIES = ("grader.checks.sanitizer", "grader.checks.sanitizerbatch", "grader.checks.counters")


def test_the_engine_names_no_tool_family_but_through_the_registry():
    """``grader/engine/`` starts, gates and joins the sanitizer and counter runs only through the
    family protocol: no module of it imports those families' modules (the counters' record of
    what ran, their traffic, the sanitizers' stray writes reach it as protocol hooks)."""
    known = _modules()
    named = sorted(f"{name} imports {imported}" for name, path in known.items() if name.startswith("grader.engine.")
                   for imported in _imports(name, path, known) if imported.startswith(TOOL_FAMILIES))
    assert not named, named


def test_reports_are_written_only_by_the_one_grade_then_write_path():
    """`grade`, `grade-repo` and a class's lanes grade and write through one call
    (``grader.report.publish.grade_then_write``), and no module outside ``grader/report/`` writes a
    report itself."""
    writers = ("write", "check_folders")
    outside = []
    for name, path in _modules().items():
        if name.startswith("grader.report"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("report.files"):
                outside += [f"{name} imports {a.name}" for a in node.names if a.name in writers]
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("report") and any(a.name == "files" for a in node.names):
                outside.append(f"{name} imports grader.report.files")
    assert not outside, outside
    callers = {name for name, path in _modules().items() if "grade_then_write(" in path.read_text()}
    assert {"grader.cli", "grader.classroom.student"} <= callers, callers


#: Calls that hand work to another process, not another thread: the lane adopts the run there
#: (``grader.isolation.inherit``).
OTHER_PROCESS = {("grader.classroom.lanes", "self.pool.submit")}


def test_every_thread_the_grader_starts_works_in_the_run_s_context():
    """A new thread does not inherit the ``ContextVar`` that holds the run's context: each callable
    the grader hands a thread (``threading.Thread``'s target, an executor's ``submit`` or ``map``) is
    wrapped in ``carried``, or a thread would find its labs, secret and GPU turns from the defaults."""

    def carried(node: ast.expr | None) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "carried"

    bare, seen = [], 0
    for name, path in _modules().items():
        if name.startswith("grader.worker"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called == "Thread":
                target = next((k.value for k in node.keywords if k.arg == "target"), node.args[1] if len(node.args) > 1 else None)
            elif called in ("submit", "map") and isinstance(func, ast.Attribute):
                if (name, ast.unparse(func)) in OTHER_PROCESS:
                    continue
                target = node.args[0] if node.args else None
            else:
                continue
            seen += 1
            if not carried(target):
                bare.append(f"{name}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert seen > 15, "the check finds the grader's threads"
    assert not bare, bare
