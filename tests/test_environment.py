"""What the grader reads from its environment is documented, and where its own files go."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from grader import cachedirs, errors

ROOT = Path(__file__).resolve().parent.parent
GRADER = ROOT / "grader"
README = ROOT / "README.md"
SECTION = "## Environment variables"


# ------------------------------------------------------------------ every variable read is in the README


def _environ_key(node: ast.AST) -> ast.expr | None:
    """The key of a read of one variable: ``os.environ.get(k)``, ``.pop(k)``, ``.setdefault(k)``,
    ``os.environ[k]``, ``os.getenv(k)``, ``k in os.environ``. (Copies of the whole environment are
    filtered through the allow list in sandbox.py; they read no variable by name.)"""
    def is_environ(n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and n.attr == "environ"

    if isinstance(node, ast.Call) and node.args:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and is_environ(f.value):
            return node.args[0]
        if isinstance(f, ast.Attribute) and f.attr == "getenv":
            return node.args[0]
    if isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
        return node.slice
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
            and is_environ(node.comparators[0]):
        return node.left
    return None


def _tool_names() -> set[str]:
    """Every tool looked up through ``toolchain.find("name")``."""
    names = set()
    for path in GRADER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name == "find" and isinstance(node.args[0].value, str):
                    names.add(node.args[0].value)
    return names


def _loop_values(tree: ast.AST, var: str) -> list[str] | None:
    """The constants a ``for var in ("A", "B")`` loop gives ``var``, if there is one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == var \
                and isinstance(node.iter, (ast.Tuple, ast.List)) \
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts):
            return [e.value for e in node.iter.elts]  # type: ignore[attr-defined]
    return None


def variables_read() -> dict[str, list[str]]:
    """Each variable the grader reads, with where: a name built at run time must resolve here
    (a loop over constants, or ``GRADER_<TOOL>`` for the tools looked up by name), or the test fails."""
    found: dict[str, list[str]] = {}
    unresolved = []
    for path in sorted(GRADER.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            key = _environ_key(node)
            if key is None:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"  # type: ignore[attr-defined]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names = [key.value]
            elif isinstance(key, ast.Name) and (values := _loop_values(tree, key.id)) is not None:
                names = values
            elif isinstance(key, ast.JoinedStr) and isinstance(key.values[0], ast.Constant) \
                    and key.values[0].value == "GRADER_" and path.name == "toolchain.py":
                names = [f"GRADER_{tool.upper().replace('-', '_')}" for tool in _tool_names()]
            else:
                unresolved.append(f"{where}: {ast.unparse(key)}")
                continue
            for name in names:
                found.setdefault(name, []).append(where)
    assert not unresolved, f"environment read by a name this test cannot resolve: {unresolved}"
    return found


def variables_documented() -> set[str]:
    text = README.read_text(encoding="utf-8")
    assert SECTION in text
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split(" | ")[0])}


def test_the_scan_finds_reads_of_every_kind():
    read = variables_read()
    # a literal, an f-string over the tools' names, a loop over constants, a .pop in the worker
    assert {"GRADER_SECRET", "GRADER_NVCC", "GRADER_COMPUTE_SANITIZER", "CUDA_PATH", "GRADER_CLOSE_FD"} <= set(read)
    assert "NO_COLOR" in read and "XDG_CACHE_HOME" in read


def test_the_scan_sees_through_each_form():
    code = ("import os\nos.environ.get('A')\nos.environ['B']\nos.getenv('C')\n'D' in os.environ\n"
            "os.environ.pop('E', '')\nos.environ['F'] = '1'\nfor v in ('G', 'H'):\n    os.environ.get(v)\n")
    tree = ast.parse(code)
    keys = [k for node in ast.walk(tree) if (k := _environ_key(node)) is not None]
    literal = {k.value for k in keys if isinstance(k, ast.Constant)}
    assert literal == {"A", "B", "C", "D", "E"}  # F is written, not read
    assert _loop_values(tree, "v") == ["G", "H"]


def test_every_variable_read_is_documented():
    read = variables_read()
    missing = {name: where for name, where in read.items() if name not in variables_documented()}
    assert not missing, f"read by the grader but not in the README's {SECTION!r} table: {missing}"


def test_every_variable_documented_is_read():
    stale = variables_documented() - set(variables_read())
    assert not stale, f"in the README's table but read nowhere in grader/: {sorted(stale)}"


# ------------------------------------------------------------------ the grader's own files


def test_the_error_log_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADER_LOG", raising=False)
    monkeypatch.delenv("GRADER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    log = tmp_path / "xdg" / "cuda-lab-grader" / "internal-errors.log"
    assert errors.internal_error_log() == log
    assert cachedirs.default_cache_dir() == log.parent  # beside the build cache
    message = errors.internal_error_message(RuntimeError("boom"))
    assert str(log) in message
    assert "RuntimeError: boom" in log.read_text()


@pytest.mark.parametrize("xdg", ["", None])
def test_the_error_log_without_xdg_is_in_the_home_cache(monkeypatch, tmp_path, xdg):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GRADER_LOG", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)  # empty means unset, as the XDG spec says
    assert errors.internal_error_log() == tmp_path / ".cache" / "cuda-lab-grader" / "internal-errors.log"


def test_grader_log_wins_and_an_empty_one_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "my.log"))
    assert errors.internal_error_log() == tmp_path / "my.log"
    monkeypatch.setenv("GRADER_LOG", "")
    assert errors.internal_error_log() == tmp_path / "xdg" / "cuda-lab-grader" / "internal-errors.log"


def test_the_cache_dir_variable_moves_only_the_build_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADER_LOG", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "builds"))
    assert cachedirs.default_cache_dir() == tmp_path / "builds"
    assert errors.internal_error_log().parent == tmp_path / "xdg" / "cuda-lab-grader"


# ------------------------------------------------------------------ licence


def test_the_license_file_is_the_one_pyproject_names():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^license = \{ text = "MIT" \}$', pyproject, re.M)  # (tomllib is 3.11+)
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) ")
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy" in text
    assert "The above copyright notice and this permission notice shall be included in all" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_the_cache_folder_follows_an_absolute_xdg_cache_home_and_ignores_a_relative_one(monkeypatch, tmp_path):
    from grader.cachedirs import user_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_dir() == tmp_path / "cuda-lab-grader"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: ignored, never taken from the working folder
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache_dir() == tmp_path / "home" / ".cache" / "cuda-lab-grader"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert user_cache_dir() == tmp_path / "home" / ".cache" / "cuda-lab-grader"
