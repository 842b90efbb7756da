"""``cuda-grader release``: what leaves the course repository.

The **student repository** (``student_template/`` is one): each lab's stub and README under
``labs/<lab>/``, the repository's README, the grading workflow (``ci/github/grade.yml``), and the
**student bundle** of the labs in ``.cuda-grader/labs/<lab>/``: the spec, header, generator, README,
stub and the baselines that checks not marked ``course_only`` compare with. Never the reference
solution, the known solutions or a secret: every file written is checked against them.

The **course bundle** (``--course``): the same lab folders with the reference solution and every
baseline, without the known solutions, for the course's runners (``--labs DIR/labs``).

Each bundled ``lab.yaml`` is the course's, with only ``files`` changed (checked by loading it
back), so a bundle grades exactly as the course repository does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import string
from pathlib import Path
from typing import Any

import yaml

from .. import __version__
from ..errors import GraderError
from ..labspec.paths import BUNDLE_DIR, BUNDLE_LABS, has_labs
from ..labspec.spec import CounterCheck, LabSpec, SpeedCheck
from ..labspec.specload import load_lab, read_yaml
from . import readme

MANIFEST = "bundle.yaml"
#: In the course repository, beside ``labs/``: the workflow students' repositories run.
WORKFLOW = Path("ci") / "github" / "grade.yml"
#: Where a student repository keeps it.
WORKFLOW_TARGET = Path(".github") / "workflows" / "grade.yml"
#: In ``labs/``: the README of a student repository.
REPO_README = "REPO_README.template.md"
#: The workflow's key that pins the grader students install (its top-level ``env``).
PIN_KEY = "GRADER_PACKAGE"
STUB = "stub.cu"
REFERENCE = "reference.cu"
HEADER_NOTE = ("# Written by `cuda-grader release` from the course's labs/{lab}/lab.yaml: the same lab, with `files`\n"
               "# pointing into this bundle. The course's runner grades with the course's own copy.\n")


def release(labs_root: Path, out: Path, course: bool = False, pin: str = "") -> list[Path]:
    """Write a student repository (or with ``course``, a course bundle) into ``out``; the files written.
    ``pin``: the grader the student repository's workflow installs (see :func:`wheel_pin`); by
    default the course workflow's own."""
    specs = _course_labs(labs_root)
    manifest = out / MANIFEST if course else out / BUNDLE_DIR / MANIFEST
    _check_target(out, manifest, labs_root)
    bundle_labs = out / "labs" if course else out / BUNDLE_LABS
    if bundle_labs.exists():
        shutil.rmtree(bundle_labs)
    written: list[Path] = []
    for spec in specs:
        written += _bundle_lab(spec, bundle_labs / spec.id, course)
    kind = "course" if course else "student"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(f"# Written by `cuda-grader release`.\nkind: {kind}\ngrader: {__version__}\n"
                        f"labs: [{', '.join(s.id for s in specs)}]\n", encoding="utf-8")
    written.append(manifest)
    if not course:
        written += _student_repository(labs_root, specs, out, pin)
        _check_nothing_secret(out, specs)
    return sorted(written)


def _course_labs(labs_root: Path) -> list[LabSpec]:
    if not has_labs(labs_root):
        raise GraderError("no labs here to release", path=labs_root)
    specs = [load_lab(p / "lab.yaml") for p in sorted(labs_root.iterdir()) if (p / "lab.yaml").is_file()]
    for spec in specs:
        if not spec.has_course_files:
            raise GraderError("is a student bundle (no reference solution): release from the course repository",
                              path=spec.source)
    return specs


def _check_target(out: Path, manifest: Path, labs_root: Path) -> None:
    """``out`` must be new, empty, or an earlier release of the same kind (never the course itself)."""
    if out.exists() and not out.is_dir():
        raise GraderError("--out: expected a folder, got a file", path=out)
    inside = labs_root.resolve()
    if inside == out.resolve() or out.resolve() in inside.parents:
        raise GraderError("--out: would overwrite the course's own labs; give a new folder", path=out)
    if out.is_dir() and any(out.iterdir()) and not manifest.is_file():
        raise GraderError(f"--out: not empty and not an earlier release (no {manifest.relative_to(out)}); "
                          "give a new folder", path=out)


def _shipped_baselines(spec: LabSpec, course: bool) -> dict[str, Path]:
    """The course bundle has every baseline; the student bundle those a check it grades uses."""
    if course:
        return dict(spec.files.baselines)
    checks: list[SpeedCheck | CounterCheck] = [*(spec.benchmark.checks if spec.benchmark else ()), *spec.counters]
    used = {c.baseline for c in checks if c.baseline and not c.course_only}
    return {name: path for name, path in spec.files.baselines.items() if name in used}


def _bundle_lab(spec: LabSpec, dest: Path, course: bool) -> list[Path]:
    files: dict[str, Any] = {"header": spec.files.header.name, "problem": spec.files.problem.name, "stub": STUB}
    copies = [(spec.files.header.name, spec.files.header), (spec.files.problem.name, spec.files.problem), (STUB, spec.files.stub)]
    if course:
        assert spec.files.reference is not None
        files["reference"] = REFERENCE
        copies.append((REFERENCE, spec.files.reference))
    baselines = {name: f"baselines/{name}.cu" for name in _shipped_baselines(spec, course)}
    if baselines:
        files["baselines"] = baselines
        copies += [(rel, spec.files.baselines[name]) for name, rel in baselines.items()]
    names = [rel for rel, _ in copies] + ["lab.yaml", "README.md"]
    if len(set(names)) != len(names):
        raise GraderError(f"the lab's files need distinct names in a bundle, got {', '.join(names)}", path=spec.source,
                          key="files")
    data = read_yaml(spec.source)
    data["files"] = files
    written = [_write(dest / "lab.yaml", HEADER_NOTE.format(lab=spec.id) + _dump(data))]
    for rel, src in copies:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest / rel)
        written.append(dest / rel)
    written.append(_write(dest / "README.md", readme.render(spec)))
    _check_same_lab(spec, load_lab(dest / "lab.yaml"))
    return written


def _check_same_lab(spec: LabSpec, bundled: LabSpec) -> None:
    """The bundled lab.yaml must say what the course's says, ``files`` apart."""
    same = dataclasses.replace(spec, files=bundled.files, root=bundled.root, source=bundled.source)
    if same != bundled:
        raise GraderError("the bundled copy does not load as the same lab (a YAML value that does not survive a "
                          "round trip?)", path=spec.source)


class _Dumper(yaml.SafeDumper):
    """Block scalars for text of several lines (the task), so the bundled YAML stays readable."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110, default_flow_style=False)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _student_repository(labs_root: Path, specs: list[LabSpec], out: Path, pin: str = "") -> list[Path]:
    course_root = labs_root.parent
    workflow = course_root / WORKFLOW
    if not workflow.is_file():
        raise GraderError("not found: the workflow students' repositories run (see ci/ in the grader's repository)",
                          path=workflow)
    written = [_write(out / WORKFLOW_TARGET, pinned_workflow(workflow, pin) if pin else workflow.read_text(encoding="utf-8"))]
    for spec in specs:
        stub = out / "labs" / spec.id / "student.cu"
        stub.parent.mkdir(parents=True, exist_ok=True)
        if not (stub.exists() and stub.samefile(spec.files.stub)):
            shutil.copyfile(spec.files.stub, stub)
        written += [stub, _write(stub.parent / "README.md", readme.render(spec))]
    template = labs_root / REPO_README
    if not template.is_file():
        raise GraderError("not found: the template of a student repository's README", path=template)
    rows = "\n".join(f"| {s.id} | `labs/{s.id}/student.cu` | {s.title} |" for s in specs)
    package = grader_pin(out / WORKFLOW_TARGET)
    install = (f"~/.venvs/cuda-grader/bin/pip install '{package}'" if package else
               "# your course publishes the grader's wheel: install the URL and SHA-256 it gives, as\n"
               "~/.venvs/cuda-grader/bin/pip install 'cuda-lab-grader[gpu] @ https://.../cuda_lab_grader-X.Y.Z-py3-none-any.whl#sha256=...'")
    text = string.Template(template.read_text(encoding="utf-8")).substitute(
        labs=rows, install=install, version=__version__, bundle=BUNDLE_LABS)
    written.append(_write(out / "README.md", text.rstrip() + "\n"))
    return written


#: A pin of the grader that no one can stand in for: a wheel's URL with its SHA-256, or a commit.
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*(\[[a-z0-9,-]+\])?) @ "
                 r"(https://\S+\.whl#sha256=[0-9a-f]{64}|git\+https://\S+@[0-9a-f]{40})")
UNPINNED = ("a name or version on a public index can be published by anyone: pin the grader by its wheel's URL and "
            "SHA-256 (cuda-grader release --grader-wheel WHEEL --grader-url URL), or by a commit "
            "(NAME @ git+https://...@<40-hex commit>)")


def grader_pin(workflow: Path) -> str:
    """The grader the workflow installs: its top-level ``env.GRADER_PACKAGE`` ("" where the course
    has not pinned one: its runner grades, and the workflow installs nothing)."""
    data = read_yaml(workflow)
    env = data.get("env")
    pin = env.get(PIN_KEY) if isinstance(env, dict) else None
    if not isinstance(pin, str):
        raise GraderError(f"expected the grader's pin (a pip requirement, or \"\"), got {pin!r}", path=workflow, key=f"env.{PIN_KEY}")
    if pin.strip() and not PIN.fullmatch(pin.strip()):
        raise GraderError(f"{pin.strip()!r} is not pinned: {UNPINNED}", path=workflow, key=f"env.{PIN_KEY}")
    return pin.strip()


def wheel_pin(wheel: Path, url: str, extras: str = "[gpu]") -> str:
    """The pin of ``wheel`` published at ``url``: ``NAME[gpu] @ URL#sha256=HEX``."""
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise GraderError("not a wheel file (build one with: pip wheel --no-deps -w dist .)", path=wheel)
    if not url.startswith("https://") or "#" in url or any(c.isspace() for c in url):
        raise GraderError(f"--grader-url: expected the https:// address of the published wheel, got {url!r}")
    if url.rsplit("/", 1)[-1] != wheel.name:
        raise GraderError(f"--grader-url: the address must end in the wheel's file name {wheel.name!r} (pip checks it), "
                          f"got {url.rsplit('/', 1)[-1]!r}")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f"{wheel.name.split('-', 1)[0].replace('_', '-')}{extras} @ {url}#sha256={digest}"


def pinned_workflow(workflow: Path, pin: str) -> str:
    """The workflow's text with ``pin`` as its ``GRADER_PACKAGE`` (comments and layout kept)."""
    text = workflow.read_text(encoding="utf-8")
    line = re.compile(rf'^(\s+{PIN_KEY}:) .*$', re.MULTILINE)
    if len(line.findall(text)) != 1:
        raise GraderError(f"expected one {PIN_KEY}: line in env", path=workflow, key=f"env.{PIN_KEY}")
    return line.sub(lambda m: f'{m.group(1)} "{pin}"', text)


def _check_nothing_secret(out: Path, specs: list[LabSpec]) -> None:
    """No reference solution and no known solution may be in a student repository, by name or by content."""
    secret: dict[bytes, Path] = {}
    for spec in specs:
        assert spec.files.reference is not None
        secret[spec.files.reference.read_bytes().strip()] = spec.files.reference
        solutions = spec.root / "solutions"
        for path in sorted(solutions.rglob("*")) if solutions.is_dir() else []:
            if path.is_file() and path.read_bytes().strip():
                secret[path.read_bytes().strip()] = path
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if {"solutions", "reference"} & set(rel.parts) or path.name == REFERENCE:
            raise GraderError(f"{rel}: a course-only path in the student repository", path=out)
        if path.is_file() and not path.is_symlink() and path.read_bytes().strip() in secret:
            raise GraderError(f"{rel} is a copy of {secret[path.read_bytes().strip()]}, which students must not get",
                              path=out)
