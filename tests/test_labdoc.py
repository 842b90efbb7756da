"""The lab.yaml reference: the committed page matches the records, and every key has its doc."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from grader.errors import SpecError
from grader.labspec import labdoc, spec
from grader.labspec.specload import load_expected, records, yaml_fields

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "labs" / labdoc.FILENAME
ROOTS = [root for _, root in labdoc.DOCUMENTS]


def undocumented(root: type) -> list[str]:
    """Every key the loader accepts under ``root`` whose field has no ``doc`` metadata."""
    missing = []
    for key, cls in records(root):
        for name, f in yaml_fields(cls).items():
            if not str(f.metadata.get("doc", "")).strip():
                missing.append(f"{key}.{name}" if key else name)
    return missing


def test_the_committed_page_is_current(monkeypatch):
    monkeypatch.delenv("GRADER_LABS_DIR", raising=False)
    assert labdoc.target() == PAGE
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert current == labdoc.render(), (
        "labs/LAB_YAML.md differs from the field docs in grader/labspec/spec.py: regenerate it with "
        "`cuda-grader readme` (or `python -m grader.labspec.labdoc`)"
    )


@pytest.mark.parametrize("root", ROOTS, ids=lambda cls: cls.__name__)
def test_every_accepted_key_has_a_doc(root):
    missing = undocumented(root)
    assert not missing, f"lab.yaml keys without field(metadata={{'doc': ...}}) in grader/labspec/spec.py: {', '.join(missing)}"


@pytest.mark.parametrize("root", ROOTS, ids=lambda cls: cls.__name__)
def test_every_record_has_its_own_docstring(root):
    for key, cls in records(root):
        doc = inspect.getdoc(cls) or ""
        # a dataclass without a docstring gets its signature as __doc__
        assert doc and not doc.startswith(f"{cls.__name__}("), f"{key or 'top level'}: {cls.__name__} needs a docstring"


@dataclasses.dataclass(frozen=True)
class _Inner:
    """An inner record."""

    documented: int = dataclasses.field(default=0, metadata={"doc": "Has one."})
    bare: int = 0


@dataclasses.dataclass(frozen=True)
class _Outer:
    """An outer record."""

    items: tuple[_Inner, ...] = dataclasses.field(default=(), metadata={"doc": "Entries."})
    derived: str = dataclasses.field(default="", metadata={"yaml": False})


def test_the_check_catches_a_key_without_doc():
    assert undocumented(_Outer) == ["items[].bare"]


def test_the_page_documents_every_record_of_the_spec_module():
    documented = {cls for root in ROOTS for _, cls in records(root)}
    declared = {obj for obj in vars(spec).values()
                if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == spec.__name__}
    assert documented == declared
    page = labdoc.render()
    for root in ROOTS:
        for key, cls in records(root):
            assert f"Record `spec.{cls.__name__}`" in page
            if key:
                assert f"### `{key}`" in page
            for name in yaml_fields(cls):
                assert f"| `{name}` |" in page


def test_the_loader_accepts_exactly_the_listed_keys(tmp_path):
    (tmp_path / "a.cu").write_text("// x\n")
    path = tmp_path / "expected.yaml"
    path.write_text("zzzzzz: 1\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_expected(path)
    assert f"known keys: {', '.join(yaml_fields(spec.ExpectedSolutions))}" in str(info.value)
    path.write_text("solutions:\n  - {file: a.cu, why: w, verdicts: {}, zzzzzz: 1}\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_expected(path)
    assert info.value.key == "solutions[0].zzzzzz"
    assert f"known keys: {', '.join(yaml_fields(spec.ExpectedSolution))}" in str(info.value)
    assert "root" not in yaml_fields(spec.LabSpec) and "source" not in yaml_fields(spec.LabSpec)
