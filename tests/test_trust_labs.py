"""The labs of record come from the course, never from the repository graded.

A student controls every file of their repository, its bundle of labs (``.cuda-grader/labs``)
included: a lab.yaml there may name ``/etc/shadow`` as its header, and its ``problem.py`` is
Python the grader would import. So: every file a lab.yaml names stays inside its lab folder; a
repository's own bundle grades only in a student's mode, announced on every score line and in
every report's identity; ``grade-class`` refuses it; and a class's lane processes grade with
exactly the labs their parent resolved.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import test_bundle
import test_wheel

from grader.cli import main
from grader.course.release import release
from grader.errors import SpecError
from grader.isolation import sandbox
from grader.labspec import paths
from grader.labspec.specload import load_lab

ROOT = Path(__file__).resolve().parent.parent
SHADOW = "/etc/shadow"
#: The wheel installed into a fresh virtual environment (test_wheel's fixture), and how to run it.
fresh, run = test_wheel.fresh, test_wheel.run
#: No lab settings from the environment (autouse), and a student repository as released (test_bundle's).
_no_lab_settings, released = test_bundle._no_lab_settings, test_bundle.released


@pytest.fixture
def repo(tmp_path, released) -> Path:
    """A student repository of one's own to make hostile."""
    dest = tmp_path / "student"
    shutil.copytree(released, dest, symlinks=True)
    return dest


def lab_yaml(repo: Path, lab: str = "tiled_matmul") -> Path:
    return repo / ".cuda-grader" / "labs" / lab / "lab.yaml"


def set_file(path: Path, key: str, value: str) -> None:
    """Point ``files.<key>`` of a bundled lab.yaml at ``value``."""
    lines = path.read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith(f"  {key}: ")]
    assert len(hits) == 1, lines
    lines[hits[0]] = f"  {key}: {value}"
    path.write_text("\n".join(lines) + "\n")


def refused(path: Path, key: str, value: str) -> str:
    with pytest.raises(SpecError) as info:
        load_lab(path)
    message = str(info.value)
    assert str(path) in message and f"{key}: " in message and repr(value) in message, message
    return message


# ------------------------------------------------------------------ (a) every file a lab.yaml names stays inside its lab


@pytest.mark.parametrize("value", [SHADOW, "../../../../../../../../etc/shadow", "../histogram/interface.h", "./../tiled_matmul/interface.h"])
def test_a_bundled_lab_names_no_file_outside_its_folder(repo, value):
    path = lab_yaml(repo)
    set_file(path, "header", value)
    message = refused(path, "files.header", value)
    assert "absolute path" in message if value.startswith("/") else "goes up a folder ('..')" in message


def test_a_bundled_lab_names_no_file_through_a_link(repo):
    path = lab_yaml(repo)
    lab = path.parent
    (lab / "shadow.h").symlink_to(SHADOW)
    set_file(path, "header", "shadow.h")
    assert "goes through a symbolic link" in refused(path, "files.header", "shadow.h")
    (lab / "baselines").rename(lab / "real")
    (lab / "baselines").symlink_to(lab / "real")  # a link among the folders on the way
    set_file(path, "header", "interface.h")
    assert "goes through a symbolic link" in refused(path, "files.baselines.naive", "baselines/naive.cu")


def test_a_bundled_lab_yaml_is_no_link_either(repo, tmp_path):
    path = lab_yaml(repo)
    elsewhere = tmp_path / "elsewhere.yaml"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(SpecError, match="is reached through a symbolic link"):
        load_lab(path)


def test_a_lab_file_must_be_a_regular_file(repo):
    path = lab_yaml(repo)
    (path.parent / "folder.h").mkdir()
    set_file(path, "header", "folder.h")
    assert "is not a regular file" in refused(path, "files.header", "folder.h")


def test_the_course_repository_names_its_references_and_nothing_outside_it(tmp_path):
    """A course checkout's lab.yaml names ../../reference/: inside the course, so allowed; not beyond."""
    for part in ("labs/tiled_matmul", "reference/tiled_matmul", "student_template/labs/tiled_matmul"):
        shutil.copytree(ROOT / part, tmp_path / "course" / part)
    path = tmp_path / "course" / "labs" / "tiled_matmul" / "lab.yaml"
    assert load_lab(path).files.reference == tmp_path / "course" / "reference" / "tiled_matmul" / "reference.cu"
    (tmp_path / "outside.h").write_text("// not the course's\n")
    set_file(path, "header", "../../../outside.h")
    assert "is outside the course repository" in refused(path, "files.header", "../../../outside.h")
    set_file(path, "header", SHADOW)
    refused(path, "files.header", SHADOW)


def test_grading_with_a_hostile_bundle_is_an_input_error_that_shows_nothing_of_the_file(repo, monkeypatch, capsys):
    monkeypatch.setattr(paths, "PROJECT_ROOT", repo.parent / "site-packages")  # installed: no course checkout
    planted = repo / "planted.txt"  # stands in for /etc/shadow where the tests cannot read it
    planted.write_text("root:$6$secret-hash-from-the-host:19000:0:99999:7:::\n")
    set_file(lab_yaml(repo), "header", str(planted))
    monkeypatch.chdir(repo)
    assert main(["grade-repo", ".", "--own-labs", "--no-gpu", "--lab", "tiled_matmul", "-q"]) == 2
    out, err = capsys.readouterr()
    assert "secret-hash" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"lab.yaml: files.header: {str(planted)!r} is an absolute path" in errors[0], err


# ------------------------------------------------------------------ a repository's own bundle: announced, recorded, refused


MARKER_CODE = "import pathlib as _p; _p.Path({marker!r}).write_text('imported')\n"


def plant_marker(repo: Path, marker: Path, lab: str = "tiled_matmul") -> None:
    """The bundle's problem.py writes ``marker`` when it is imported."""
    problem = repo / ".cuda-grader" / "labs" / lab / "problem.py"
    problem.write_text(MARKER_CODE.format(marker=str(marker)) + problem.read_text())


def class_of(tmp_path: Path, released: Path, names: tuple[str, ...] = ("alice", "bob")) -> Path:
    folder = tmp_path / "class"
    for name in names:
        shutil.copytree(released, folder / name, symlinks=True)
    return folder


def test_grade_class_refuses_a_repository_bundle_in_one_line(tmp_path, released, monkeypatch, capsys):
    monkeypatch.setattr(paths, "PROJECT_ROOT", tmp_path / "site-packages")  # installed: no course checkout
    folder = class_of(tmp_path, released)
    monkeypatch.chdir(folder / "alice")  # the TA's working folder is inside a student's repository
    assert main(["grade-class", str(folder), "--out", str(tmp_path / "results"), "--no-gpu", "-q"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: grade-class grades with the course's labs, never a repository's own: the labs found "
                          "are .cuda-grader/labs (the repository's student bundle"), err
    assert "pass --labs DIR" in err
    assert not (tmp_path / "results").exists()


def test_a_class_never_imports_a_students_problem_py(tmp_path, released, monkeypatch, capsys):
    """Where a GPU would import the lab's problem.py (the inputs and the oracle) in the grader's
    process: with the GPU probe stubbed on a CPU machine, a bundle's problem.py that leaves a
    marker when imported, and the TA's folder inside that student's repository."""
    from grader.classroom import run as class_run
    from grader.engine import grade as grading
    from grader.host import gpu

    monkeypatch.setattr(paths, "PROJECT_ROOT", tmp_path / "site-packages")
    folder = class_of(tmp_path, released)
    marker = tmp_path / "imported.txt"
    plant_marker(folder / "alice", marker)
    fake = gpu.GpuProbe(gpu.GpuInfo("Stub GPU", (9, 0), "0.0"))
    monkeypatch.setattr(grading, "probe_for", lambda options: fake)
    monkeypatch.setattr(class_run, "gpu_slots", lambda options, wanted: [])  # lanes in this process

    def stop(*args, **kwargs):
        raise RuntimeError("stubbed: no GPU to run on")

    monkeypatch.setattr(grading, "Submission", stop)  # after the problem module is loaded, before any GPU work
    monkeypatch.chdir(folder / "alice")
    quick = ["--lab", "tiled_matmul", "--no-sanitizers", "--no-counters", "--no-timing", "-q", "-j", "1"]
    code = main(["grade-class", str(folder), "--out", str(tmp_path / "refused"), *quick])
    assert not marker.exists(), "grade-class imported the student's problem.py"
    assert code == 2
    capsys.readouterr()
    results = tmp_path / "results"
    assert main(["--labs", str(ROOT / "labs"), "grade-class", str(folder), "--out", str(results), *quick]) == 0
    assert not marker.exists(), "grade-class imported the student's problem.py"
    for student in ("alice", "bob"):
        doc = json.loads((results / "students" / student / "report.json").read_text())
        assert doc["identity"]["labs_origin"] == "--labs" and doc["identity"]["labs_folder"] == str(ROOT / "labs")
        assert "stubbed: no GPU to run on" in json.dumps(doc["labs"])  # graded as far as the GPU, with the course's labs


def test_grade_repo_from_its_own_bundle_says_so_on_every_score_line_and_in_every_report(repo, monkeypatch, capsys):
    monkeypatch.setattr(paths, "PROJECT_ROOT", repo.parent / "site-packages")
    monkeypatch.chdir(repo)
    assert main(["grade-repo", ".", "--own-labs", "--no-gpu", "--lab", "tiled_matmul", "--lab", "histogram", "-q", "--out",
                 "report"]) == 0
    out, err = capsys.readouterr()
    note = "[feedback only: graded with the repository's own lab files (.cuda-grader/labs), not the course's]"
    scores = [line for line in out.splitlines() if line.strip().startswith(("score ", "== total"))]
    assert len(scores) == 3 and all(line.endswith(note) for line in scores), out
    assert "labs: .cuda-grader/labs (the repository's student bundle: feedback only" in err  # even with -q
    from grader.engine.identity import labs_folder_hash

    bundle = (repo / ".cuda-grader" / "labs").resolve()
    identity = json.loads((repo / "report" / "report.json").read_text())["identity"]
    assert identity["labs_origin"] == "repository bundle"
    assert identity["labs_folder"] == str(bundle) and identity["labs_hash"] == labs_folder_hash(str(bundle))
    xml = (repo / "report" / "report.xml").read_text()
    assert 'name="identity.labs_origin" value="repository bundle"' in xml
    assert f'name="identity.labs_hash" value="{identity["labs_hash"]}"' in xml
    markdown = (repo / "report" / "report.md").read_text()
    assert markdown.count(note.strip("[]")) == 3, markdown  # under the title and on each lab's score line


def test_grading_with_the_course_labs_is_no_feedback(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert main(["--labs", str(ROOT / "labs"), "grade", "tiled_matmul", "labs/tiled_matmul/student.cu", "--no-gpu",
                 "-q", "--json", "r.json"]) == 0
    out, err = capsys.readouterr()
    assert "feedback only" not in out + err
    identity = json.loads((repo / "r.json").read_text())["identity"]
    assert identity["labs_origin"] == "--labs" and identity["labs_folder"] == str(ROOT / "labs")


def test_a_labs_folder_hash_sees_every_file_and_follows_no_link(tmp_path):
    from grader.engine.identity import labs_folder_hash

    labs = tmp_path / "labs"
    (labs / "a").mkdir(parents=True)
    (labs / "a" / "lab.yaml").write_text("x")
    first = labs_folder_hash.__wrapped__(str(labs))
    (labs / "a" / "__pycache__").mkdir()
    (labs / "a" / "__pycache__" / "problem.pyc").write_bytes(b"\0")
    assert labs_folder_hash.__wrapped__(str(labs)) == first  # importing problem.py changes nothing
    (labs / "a" / "problem.py").write_text("y")
    second = labs_folder_hash.__wrapped__(str(labs))
    assert second != first
    (labs / "a" / "shadow").symlink_to(SHADOW)
    assert labs_folder_hash.__wrapped__(str(labs)) != second  # named, never read


# ------------------------------------------------------------------ lane processes grade with the parent's labs


def test_a_lane_process_resolves_exactly_the_parents_labs(tmp_path, released, monkeypatch):
    """The real lane (a spawned process, as the scheduler starts it, CPU only: its setup needs no
    GPU) against the parent's --labs, with a student's bundle in the current folder."""
    import multiprocessing
    from dataclasses import replace

    from grader.classroom.lanes import GpuLane
    from grader.context import LabsSearch, current, enter
    from grader.host.gpus import GpuSlot
    from grader.isolation.options import GradeOptions

    course = tmp_path / "course"
    release(ROOT / "labs", course, course=True)
    monkeypatch.chdir(released)  # the TA's folder: inside a student's repository
    enter(replace(current(), labs=LabsSearch(chosen=course / "labs")))  # --labs
    parent = paths.locate_labs()
    manager = multiprocessing.get_context("spawn").Manager()
    classmates = [str(tmp_path / "class" / "alice"), str(tmp_path / "class" / "bob")]
    with sandbox.kept_out(classmates):  # as grade_class starts its lanes
        lane = GpuLane(GpuSlot(0, "trust-labs-test", "no GPU", (9, 0)), GradeOptions(gpu=False), manager.Queue(), "visible", 1.0)
    try:
        child = lane.pool.submit(paths.locate_labs).result(timeout=120)
        assert child.path == course / "labs" and lane.pool.submit(paths.labs_dir).result(timeout=60) == course / "labs"
        assert child == parent and child.origin == "--labs"
        run = lane.pool.submit(current).result(timeout=60)
        assert run.secret == current().secret  # one run, one secret: every lane draws the same inputs
        assert run.turns is None  # one seat on the GPU: no turns to take
        # the lane's sandboxes cover the class's folders as the parent's do
        assert set(classmates) <= set(lane.pool.submit(sandbox.kept_out_now).result(timeout=60))
    finally:
        lane.close()
        manager.shutdown()


# ------------------------------------------------------------------ the installed grader (the wheel), as students and TAs run it

STUB_GPU_LANES = """import sys
from grader.classroom import run
from grader.host import gpus
# the GPU probe, stubbed: one GPU lane; the lane's process itself runs as it is and finds no GPU
run.gpu_slots = lambda options, wanted: [gpus.GpuSlot(0, "trust-labs-wheel", "Stub GPU", (9, 0))]
from grader.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def wheel_repo(fresh) -> Path:
    """A student repository released by the installed grader."""
    grader, env, tmp = fresh
    repo = tmp / "trust-repo"
    if not repo.exists():
        proc = run([str(grader), "--labs", str(ROOT / "labs"), "release", "--out", str(repo)], tmp, env)
        assert proc.returncode == 0, proc.stderr
    return repo


@pytest.mark.wheel
@pytest.mark.parametrize("command", [["grade-repo", "."], ["grade", "tiled_matmul", "labs/tiled_matmul/student.cu"]])
def test_installed_grader_announces_and_records_the_repository_bundle(fresh, wheel_repo, command):
    grader, env, _ = fresh
    report = wheel_repo / f"report-{command[0]}"
    proc = run([str(grader), *command, "--own-labs", "--no-gpu", "-q", "--out", str(report)], wheel_repo, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    note = "[feedback only: graded with the repository's own lab files (.cuda-grader/labs), not the course's]"
    scores = [line for line in proc.stdout.splitlines() if line.strip().startswith(("score ", "== total"))]
    assert scores and all(line.endswith(note) for line in scores), proc.stdout
    assert "labs: .cuda-grader/labs (the repository's student bundle: feedback only" in proc.stderr  # with -q too
    from grader.engine.identity import labs_folder_hash

    bundle = (wheel_repo / ".cuda-grader" / "labs").resolve()
    identity = json.loads((report / "report.json").read_text())["identity"]
    assert (identity["labs_origin"], identity["labs_folder"]) == ("repository bundle", str(bundle))
    assert identity["labs_hash"] == labs_folder_hash.__wrapped__(str(bundle))
    xml = (report / "report.xml").read_text()
    assert 'name="identity.labs_origin" value="repository bundle"' in xml
    assert f'name="identity.labs_hash" value="{identity["labs_hash"]}"' in xml


@pytest.mark.wheel
def test_installed_grade_class_refuses_a_repository_bundle(fresh, wheel_repo, tmp_path):
    grader, env, _ = fresh
    folder = class_of(tmp_path, wheel_repo)
    marker = tmp_path / "imported.txt"
    plant_marker(folder / "alice", marker)
    proc = run([str(grader), "grade-class", str(folder), "--out", str(tmp_path / "results"), "--no-gpu"], folder / "alice", env)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: grade-class grades with the course's labs, never a repository's own") and "pass --labs DIR" in line
    assert not marker.exists() and not (tmp_path / "results").exists()


@pytest.mark.wheel
def test_installed_grade_class_on_gpu_lanes_grades_with_the_labs_given(fresh, wheel_repo, tmp_path):
    """A class through a GPU lane's own process (the GPU probe stubbed, the lane real), from the
    wheel: each student is graded with --labs, from a neutral folder and from inside a student's
    repository whose bundle says otherwise."""
    grader, env, tmp = fresh
    course = tmp / "trust-course"
    if not course.exists():
        assert run([str(grader), "--labs", str(ROOT / "labs"), "release", "--course", "--out", str(course)], tmp, env).returncode == 0
    folder = class_of(tmp_path, wheel_repo)
    alice_lab = folder / "alice" / ".cuda-grader" / "labs" / "tiled_matmul" / "lab.yaml"
    alice_lab.write_text(alice_lab.read_text().replace("title: ", "title: ALICE'S OWN ", 1))
    title = load_lab(course / "labs" / "tiled_matmul").title
    python = grader.parent / "python"
    for where in (tmp_path, folder / "alice"):
        results = tmp_path / f"results-{where.name}"
        proc = run([str(python), "-I", "-c", STUB_GPU_LANES, "--labs", str(course / "labs"), "grade-class", str(folder), "--out",
                    str(results), "--lab", "tiled_matmul", "--no-sanitizers", "--no-counters", "--no-timing"], where, env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for student in ("alice", "bob"):
            doc = json.loads((results / "students" / student / "report.json").read_text())
            (lab,) = doc["labs"]
            assert lab["title"] == title, (where, student, lab["title"])  # not the bundle in the current folder
            checks = {c["id"]: c for c in lab["checks"]}
            assert checks["compile"]["outcome"] == "pass", (where, student, checks["compile"])  # not "no labs found"
            assert (doc["identity"]["labs_origin"], doc["identity"]["labs_folder"]) == ("--labs", str(course / "labs"))


def _course_bundle(grader: Path, env: dict[str, str], tmp: Path) -> Path:
    """The course bundle, written by the installed grader (`release --course`)."""
    course = tmp / "trust-course"
    if not course.exists():
        assert run([str(grader), "--labs", str(ROOT / "labs"), "release", "--course", "--out", str(course)], tmp, env).returncode == 0
    return course


@pytest.mark.wheel
def test_the_slurm_script_grades_and_merges_a_class_with_the_installed_wheel_and_the_course_bundle(fresh, wheel_repo, tmp_path):
    """As a cluster runs it: GRADER is the venv's cuda-grader (no checkout anywhere), the labs are the
    course bundle's through GRADER_LABS_DIR, the job starts in a folder of its own."""
    grader, env, tmp = fresh
    course = _course_bundle(grader, env, tmp)
    folder = class_of(tmp_path, wheel_repo)
    (tmp_path / "roster.csv").write_text(f"student,path\nalice,{folder / 'alice'}\nbob,{folder / 'bob'}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/sbatch.log\n')
    (bin_dir / "sbatch").chmod(0o755)
    job = {**env, "PATH": f"{bin_dir}:{env['PATH']}", "GRADER": str(grader), "GRADER_LABS_DIR": str(course / "labs"),
           "GRADER_NO_GPU": "1", "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "1",
           "SLURM_CPUS_PER_TASK": "2"}
    script = ROOT / "ci" / "slurm" / "grade-class.sbatch"
    workdir = tmp_path / "job"
    workdir.mkdir()
    results = tmp_path / "results"
    for task in ("1", "2"):
        done = run(["bash", str(script), str(tmp_path / "roster.csv"), str(results)], workdir, {**job, "SLURM_ARRAY_TASK_ID": task})
        assert done.returncode == 0, done.stderr
    assert run(["bash", str(script), "--merge", str(results), "2"], workdir, job).returncode == 0
    rows = (results / "class" / "grades.csv").read_text().splitlines()
    assert rows[0].startswith("student,") and [r.split(",")[0] for r in rows[1:]] == ["alice", "bob"]
    for student in ("alice", "bob"):
        doc = json.loads((results / "class" / "students" / student / "report.json").read_text())
        assert (doc["identity"]["labs_origin"], doc["identity"]["labs_folder"]) == ("GRADER_LABS_DIR", str(course / "labs"))


@pytest.mark.wheel
def test_the_runner_wrapper_grades_with_the_installed_wheel_and_the_course_bundle(fresh, tmp_path):
    """cuda-grader-ci as setup-runner.sh installs it: its venv is the wheel's, its labs the course bundle."""
    import io
    import subprocess
    import tarfile

    if not sandbox.detect().active:
        pytest.skip(f"the wrapper refuses to grade without a sandbox: {sandbox.detect().reason}")
    grader, env, tmp = fresh
    course = _course_bundle(grader, env, tmp)
    text = (ROOT / "ci" / "runner" / "cuda-grader-ci").read_text()
    script = tmp_path / "cuda-grader-ci"
    script.write_text(text.replace("CONF=/etc/cuda-grader/ci.conf\n", f"CONF={tmp_path / 'ci.conf'}\n"))
    script.chmod(0o755)
    for name in ("home", "cache", "tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "gpus").write_text("ghrunner-0 0\n")
    (tmp_path / "ci.conf").write_text(
        f"GRADER_VENV={grader.parent.parent}\nCOURSE_LABS={course / 'labs'}\nRUNNER_GPUS={tmp_path / 'gpus'}\n"
        f"CACHE_DIR={tmp_path / 'cache'}\nGRADER_HOME={tmp_path / 'home'}\nGRADER_TMP={tmp_path / 'tmp'}\nTIME_LIMIT=300\n")
    stub = (ROOT / "student_template" / "labs" / "tiled_matmul" / "student.cu").read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("labs/tiled_matmul/student.cu")
        info.size = len(stub)
        tar.addfile(info, io.BytesIO(stub))
    proc = subprocess.run([str(script)], input=buf.getvalue(), capture_output=True, timeout=600,
                          env={"PATH": env["PATH"], "SUDO_USER": "ghrunner-0", "GRADER_NO_GPU": "1"})
    assert proc.returncode == 0, proc.stderr.decode()
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        doc = json.load(tar.extractfile("report.json"))  # type: ignore[arg-type]
    assert doc["identity"]["labs_folder"] == str(course / "labs")
    labs = {lab["lab"]: {c["id"]: c["outcome"] for c in lab["checks"]} for lab in doc["labs"]}
    assert labs["tiled_matmul"]["compile"] == "pass" and len(labs) == 5  # the others not handed in
