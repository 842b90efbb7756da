"""The kit for GitHub Actions: every workflow validates offline (the schema, zizmor), the student
template carries the course's workflow, and the runner's scripts parse and pass shellcheck. The
wrapper that runs grading as another user is run for real (as this user) on a course bundle."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from grader import __version__
from grader.course.release import PIN_KEY, grader_pin
from grader.errors import GraderError

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "ci" / "github" / "grade.yml"
TEMPLATE_WORKFLOW = ROOT / "student_template" / ".github" / "workflows" / "grade.yml"
RUNNER = ROOT / "ci" / "runner"
SCRIPTS = [RUNNER / "setup-runner.sh", RUNNER / "runner-prepare", RUNNER / "runner-clean", RUNNER / "cuda-grader-ci",
           RUNNER.parent / "slurm" / "grade-class.sbatch"]
WORKFLOWS = sorted({*ROOT.glob("ci/github/*.yml"), *ROOT.glob("**/.github/workflows/*.yml"),
                    *ROOT.glob("**/.github/workflows/*.yaml")})


def tool(name: str) -> str:
    """The tool beside this interpreter (a virtual environment's) or on PATH; skip if absent."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return found


def test_the_repository_has_the_workflows():
    assert WORKFLOW in WORKFLOWS and TEMPLATE_WORKFLOW in WORKFLOWS


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(ROOT)))
def test_workflow_validates_against_the_schema(path):
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(ROOT)))
def test_zizmor_finds_nothing_of_medium_severity_or_above(path):
    proc = subprocess.run([tool("zizmor"), "--offline", "--min-severity", "medium", "--no-progress", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_student_template_runs_the_course_workflow():
    assert TEMPLATE_WORKFLOW.read_bytes() == WORKFLOW.read_bytes(), (
        "student_template/.github/workflows/grade.yml differs from ci/github/grade.yml: run "
        "`cuda-grader release --out student_template`")


def _workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True)  # YAML 1.1 reads the key `on` as true
    return data


def test_the_workflow_is_locked_down():
    data = _workflow()
    assert set(data["on"]) == {"push", "pull_request", "workflow_dispatch"}  # never pull_request_target
    assert data["permissions"] == {}
    (job,) = data["jobs"].values()
    assert job["permissions"] == {"contents": "read"}
    assert "vars.CUDA_GRADER_RUNNER_LABELS" in job["runs-on"] and '["self-hosted", "linux", "gpu"]' in job["runs-on"]
    uses = [step["uses"] for step in job["steps"] if "uses" in step]
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses
    checkout = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False
    for step in job["steps"]:
        assert "${{" not in step.get("run", ""), f"an expression inside a script: {step['name']}"


def test_the_workflow_fails_only_on_the_graders_exit_code():
    (job,) = _workflow()["jobs"].values()
    grade = next(step for step in job["steps"] if step["name"] == "Grade")
    script = grade["run"]
    # --fail-under only when the course sets it; the job's status is the grader's exit code
    assert 'if [ -n "${FAIL_UNDER:-}" ]; then args+=(--fail-under "$FAIL_UNDER"); fi' in script
    assert grade["env"]["FAIL_UNDER"] == "${{ vars.CUDA_GRADER_FAIL_UNDER }}"
    assert script.rstrip().endswith('exit "$rc"')
    assert '>> "$GITHUB_STEP_SUMMARY"' in script and "report.md" in script
    upload = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "${{ !cancelled() }}"
    assert "report.xml" in upload["with"]["path"] and "report.json" in upload["with"]["path"]


def test_the_workflow_script_parses_and_passes_shellcheck(tmp_path):
    (job,) = _workflow()["jobs"].values()
    script = tmp_path / "grade.sh"
    script.write_text("#!/bin/bash\n" + next(s for s in job["steps"] if s["name"] == "Grade")["run"])
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0
    proc = subprocess.run([tool("shellcheck"), str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_the_course_workflow_pins_no_grader_by_name():
    """No name on a public index can stand in for the grader: the course's workflow pins nothing
    until the course publishes its wheel, and a pin by name or version is refused."""
    assert grader_pin(WORKFLOW) == "", f"env.{PIN_KEY} in {WORKFLOW}"
    assert grader_pin(TEMPLATE_WORKFLOW) == ""


@pytest.mark.parametrize("pin,ok", [
    (f"cuda-lab-grader[gpu]=={__version__}", False),
    ("cuda-lab-grader[gpu]", False),
    ("cuda-lab-grader[gpu] @ https://example.org/cuda_lab_grader-0.1.0-py3-none-any.whl", False),  # no hash
    ("cuda-lab-grader[gpu] @ https://example.org/cuda_lab_grader-0.1.0-py3-none-any.whl#sha256=" + "ab" * 32, True),
    ("cuda-lab-grader[gpu] @ git+https://example.org/course/grader@" + "0" * 40, True),
    ("cuda-lab-grader[gpu] @ git+https://example.org/course/grader@main", False),  # a branch moves
])
def test_a_grader_pin_is_a_wheel_with_its_hash_or_a_commit(tmp_path, pin, ok):
    workflow = tmp_path / "grade.yml"
    workflow.write_text(WORKFLOW.read_text().replace('GRADER_PACKAGE: ""', f'GRADER_PACKAGE: "{pin}"'))
    if ok:
        assert grader_pin(workflow) == pin
    else:
        with pytest.raises(GraderError, match="is not pinned: a name or version on a public index can be published by anyone"):
            grader_pin(workflow)


def test_release_pins_the_published_wheel_by_url_and_sha256(tmp_path):
    from grader.cli import main

    wheel = tmp_path / f"cuda_lab_grader-{__version__}-py3-none-any.whl"
    wheel.write_bytes(b"the course's build of the grader")
    url = f"https://github.com/course/grader/releases/download/v{__version__}/{wheel.name}"
    repo = tmp_path / "repo"
    assert main(["release", "--out", str(repo), "--grader-wheel", str(wheel), "--grader-url", url]) == 0
    pin = f"cuda-lab-grader[gpu] @ {url}#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}"
    assert grader_pin(repo / ".github" / "workflows" / "grade.yml") == pin
    assert f"pip install '{pin}'" in (repo / "README.md").read_text()
    assert main(["release", "--out", str(tmp_path / "r2"), "--grader-wheel", str(wheel), "--grader-url",
                 url.replace(wheel.name, "other.whl")]) == 2
    assert main(["release", "--out", str(tmp_path / "r3"), "--grader-wheel", str(wheel)]) == 2


@pytest.mark.parametrize("package,says", [
    (f"cuda-lab-grader[gpu]=={__version__}", "GRADER_PACKAGE is not pinned by URL and SHA-256 or by commit"),
    ("", "this course grades on its own runner, and none is here"),
])
def test_the_workflow_installs_no_grader_that_is_not_pinned(tmp_path, package, says):
    (job,) = _workflow()["jobs"].values()
    script = tmp_path / "grade.sh"
    script.write_text("#!/bin/bash\n" + next(s for s in job["steps"] if s["name"] == "Grade")["run"])
    env = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), "GRADER_CI": str(tmp_path / "no-runner-here"),
           "GRADER_PACKAGE": package, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"::error::{says}" in proc.stdout
    assert not (tmp_path / "cuda-grader-venv").exists()  # nothing was installed


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_runner_scripts_parse_and_pass_shellcheck(script):
    assert os.access(script, os.X_OK), f"{script} is not executable"
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([tool("shellcheck"), "--severity=style", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_the_sudo_rule_allows_exactly_the_wrapper():
    text = (RUNNER / "setup-runner.sh").read_text()
    rules = re.findall(r'echo "(ghrunner-\$i ALL=.*)"', text)
    assert rules == ["ghrunner-$i ALL=($GRADING_USER) NOPASSWD: $WRAPPER"]
    assert "WRAPPER=/usr/local/sbin/cuda-grader-ci" in text
    assert "visudo -cqf" in text
    # the course bundle goes where only the grading user's group can read it
    assert 'chown -R "root:$GRADING_USER" "$OPT/course.new"' in text and "chmod -R u=rwX,g=rX,o=" in text
    unit = (RUNNER / "cuda-grader-runner@.service").read_text()
    assert "User=ghrunner-%i" in unit and "ExecStartPre=+/usr/local/libexec/cuda-grader/runner-prepare %i" in unit
    assert "KillMode=control-group" in unit and "NoNewPrivileges" not in unit  # sudo must work in the job


# ------------------------------------------------------------------ the wrapper, run for real


@pytest.fixture
def wrapper(tmp_path):
    """cuda-grader-ci with its settings file moved into ``tmp_path``, and a course bundle to grade with."""
    from grader.isolation import sandbox

    if not sandbox.detect().active:
        pytest.skip(f"the wrapper refuses to grade without a sandbox: {sandbox.detect().reason}")
    from grader.cli import main

    assert main(["release", "--course", "--out", str(tmp_path / "course")]) == 0
    script = tmp_path / "cuda-grader-ci"
    text = (RUNNER / "cuda-grader-ci").read_text()
    assert text.count("CONF=/etc/cuda-grader/ci.conf\n") == 1
    script.write_text(text.replace("CONF=/etc/cuda-grader/ci.conf\n", f"CONF={tmp_path / 'ci.conf'}\n"))
    script.chmod(0o755)
    for name in ("home", "cache", "tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "gpus").write_text("ghrunner-0 0\n")
    venv = tmp_path / "venv"  # what the wrapper calls: this interpreter, and the grader through it
    (venv / "bin").mkdir(parents=True)
    for name, run in (("python", f'exec {sys.executable} "$@"'), ("cuda-grader", f'exec {sys.executable} -I -m grader "$@"')):
        (venv / "bin" / name).write_text(f"#!/bin/sh\n{run}\n")
        (venv / "bin" / name).chmod(0o755)
    (tmp_path / "ci.conf").write_text(
        f"GRADER_VENV={venv}\nCOURSE_LABS={tmp_path / 'course' / 'labs'}\nRUNNER_GPUS={tmp_path / 'gpus'}\n"
        f"CACHE_DIR={tmp_path / 'cache'}\nGRADER_HOME={tmp_path / 'home'}\nGRADER_TMP={tmp_path / 'tmp'}\n"
        f"CUDA_HOME={os.environ.get('CUDA_HOME', '/usr/local/cuda')}\nTIME_LIMIT=300\n")
    return script


def _tar(files: dict[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, str):  # a link
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def test_the_wrapper_grades_only_lab_files_and_returns_the_reports(wrapper, tmp_path):
    stub = (ROOT / "student_template" / "labs" / "tiled_matmul" / "student.cu").read_bytes()
    given = _tar({"labs/tiled_matmul/student.cu": stub, "labs/histogram/student.cu": "/etc/passwd",
                  "labs/x/other.cu": b"int x;", "../escape/student.cu": b"int y;"})
    env = {"PATH": os.environ["PATH"], "SUDO_USER": "ghrunner-0", "GRADER_NO_GPU": "1"}
    proc = subprocess.run([str(wrapper), "--fail-under", "50%"], input=given, env=env, capture_output=True, timeout=600)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err  # graded, below --fail-under
    assert f"cuda-grader-ci: cuda-grader {__version__}, the course's labs, GPU 0, sandbox: bubblewrap" in err
    assert "left out labs/histogram/student.cu: not a regular file" in err
    assert "left out 'labs/x/other.cu': not a lab file" in err and "left out '../escape/student.cu'" in err
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        assert sorted(tar.getnames()) == ["report.json", "report.md", "report.xml"]
        import json

        doc = json.load(tar.extractfile("report.json"))  # type: ignore[arg-type]
    labs = {lab["lab"]: lab for lab in doc["labs"]}
    assert labs["tiled_matmul"]["checks"][0]["outcome"] == "pass"
    assert labs["histogram"]["checks"][0]["message"].startswith("labs/histogram/student.cu not found")
    # graded with the course's labs: the course-only checks ran (here: skipped for want of a GPU only)
    speed = next(c for c in labs["tiled_matmul"]["checks"] if c["id"] == "speed_vs_reference")
    assert not speed["message"].startswith("graded on the course's runner"), speed


@pytest.mark.parametrize("args,message", [
    (["--fail-under", "1; rm -rf /"], "--fail-under: expected points or N%"),
    (["--labs", "/tmp"], "unknown argument"),
])
def test_the_wrapper_refuses_other_arguments(wrapper, args, message):
    proc = subprocess.run([str(wrapper), *args], input=b"", env={"PATH": os.environ["PATH"], "SUDO_USER": "ghrunner-0"},
                          capture_output=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr.decode()
    assert proc.stdout == b""


def test_the_wrapper_needs_a_runner_with_a_gpu(wrapper):
    proc = subprocess.run([str(wrapper)], input=b"", env={"PATH": os.environ["PATH"], "SUDO_USER": "someone"},
                          capture_output=True, timeout=60)
    assert proc.returncode == 3 and "no GPU is assigned to runner user someone" in proc.stderr.decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="setup-runner.sh runs as root only (CI runs as root)")
def test_setup_runner_refuses_a_runner_tarball_whose_sha256_differs(tmp_path):
    """What its usage says: the tarball is checked against the SHA-256 the release page lists,
    before the course bundle, the tools or the GPUs are looked at."""
    tarball = tmp_path / "actions-runner-linux-x64-2.330.0.tar.gz"
    tarball.write_bytes(b"not the runner")
    token = tmp_path / "token"
    token.write_text("t")
    good = hashlib.sha256(tarball.read_bytes()).hexdigest()

    def setup(*sha: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(RUNNER / "setup-runner.sh"), "--org", "course", "--token-file", str(token),
                               "--runner-tar", str(tarball), *sha, "--course-bundle", str(tmp_path / "none"),
                               "--grader", "cuda-lab-grader==0.1.0"], capture_output=True, text=True, timeout=60)

    assert "missing --runner-sha256" in setup().stderr
    wrong = setup("--runner-sha256", "0" * 64)
    assert wrong.returncode == 1 and f"the SHA-256 of {tarball} is {good}, not {'0' * 64}" in wrong.stderr
    right = setup("--runner-sha256", good.upper())
    assert right.returncode == 1 and "--course-bundle:" in right.stderr and "SHA-256" not in right.stderr


# ------------------------------------------------------------------ Kubernetes beside SLURM

KUBE = ROOT / "ci" / "kubernetes"


def _kube(name: str) -> dict:
    return yaml.safe_load((KUBE / name).read_text())


def _container(doc: dict) -> dict:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("name", ["grade-class-job.yaml", "merge-job.yaml"])
def test_the_kubernetes_jobs_validate_against_the_kubernetes_schemas(name, tmp_path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    doc = _kube(name)
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    broken = yaml.safe_load((KUBE / name).read_text())
    _container(broken)["gpus"] = 1  # no such field: strict validation must see it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_each_indexed_pod_grades_its_shard_on_one_gpu_and_the_merge_takes_every_shard():
    grade, merge = _kube("grade-class-job.yaml"), _kube("merge-job.yaml")
    assert grade["spec"]["completionMode"] == "Indexed"
    shards = grade["spec"]["completions"]
    g, m = _container(grade), _container(merge)
    assert int(_env(g)["SHARDS"]) == int(_env(m)["SHARDS"]) == shards and 1 <= grade["spec"]["parallelism"] <= shards
    assert g["resources"]["limits"]["nvidia.com/gpu"] == 1 and "nvidia.com/gpu" not in m["resources"]["limits"]
    script = g["args"][0]
    assert "shard=$((JOB_COMPLETION_INDEX + 1))" in script
    assert 'cuda-grader grade-class --roster "$ROSTER" --out "$RESULTS/shards/$shard" --shard "$shard/$SHARDS"' in script
    assert 'exec cuda-grader merge "$@" --out "$RESULTS/class"' in m["args"][0]
    sbatch = (ROOT / "ci" / "slurm" / "grade-class.sbatch").read_text()
    assert '--shard "$index/$count"' in sbatch and 'merge "${shards[@]}" --out "$results/class"' in sbatch  # the same two steps


@pytest.mark.parametrize("name", ["grade-class-job.yaml", "merge-job.yaml"])
def test_the_kubernetes_jobs_scripts_pass_shellcheck(name, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n" + _container(_kube(name))["args"][0])
    proc = subprocess.run([tool("shellcheck"), "--severity=style", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_the_merge_script_names_every_shard_folder(tmp_path):
    """The merge Job's script, run by sh with a stand-in cuda-grader, passes shards 1..SHARDS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cuda-grader").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / "cuda-grader").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SHARDS": "3", "RESULTS": "/r"}
    done = subprocess.run(["/bin/sh", "-c", _container(_kube("merge-job.yaml"))["args"][0]], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["merge", "/r/shards/1", "/r/shards/2", "/r/shards/3", "--out", "/r/class"]
