"""Attacks a hostile student tries against the grader, each tried for real and required to fail.

Sandbox attacks run as root (the usual case in containers and on self-hosted runners) and, where
this machine can, again as an unprivileged user: the grader's own code is then run by the
system's Python as ``nobody`` (through ``setpriv``) and confines the attack itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from importable import copy_grader

from grader.checks.samples import bound_by_round_trips
from grader.cli import main as cli_main
from grader.engine.grade import grade
from grader.errors import GraderError
from grader.host.safeio import SOURCE_LIMIT_BYTES, read_beneath, read_file
from grader.isolation import build as nvcc
from grader.isolation import sandbox as sandboxing
from grader.isolation.launch import worker_env
from grader.isolation.options import GradeOptions
from grader.labspec.labs import PROJECT_ROOT, find_lab
from grader.outcome import Outcome
from grader.worker.confine import landlock_abi

PROBES = Path(__file__).with_name("sandbox_probes.py")
SANDBOX = sandboxing.detect()
needs_sandbox = pytest.mark.skipif(not SANDBOX.active, reason=f"no sandbox here: {SANDBOX.reason}")
SECRETS = {"GRADER_SECRET": "s3cret-seed-7731", "GITHUB_TOKEN": "ghp_TOKENTOKENTOKEN123", "AWS_SECRET_ACCESS_KEY": "awsKEY998"}
NOBODY = 65534


def _user_mode_problem() -> str:
    """Why the attacks cannot also be run as an unprivileged user here ("" if they can)."""
    if os.geteuid() != 0:
        return "the tests already run as an unprivileged user"
    if not shutil.which("setpriv"):
        return "setpriv (util-linux) is not installed"
    if not os.path.exists("/usr/bin/python3"):
        return "no system Python at /usr/bin/python3 for the unprivileged user"
    if not SANDBOX.active:
        return f"no sandbox here: {SANDBOX.reason}"
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", SANDBOX.bwrap,
                            "--ro-bind", "/", "/", "--unshare-pid", "--", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bubblewrap does not run for an unprivileged user here ({probe.stderr.strip()[-200:]})"
    return ""


USER_MODE = _user_mode_problem()


def _public_copy_of_grader() -> Path:
    """A copy of the grader package that an unprivileged user can read."""
    root = Path(tempfile.mkdtemp(prefix="grader-copy-", dir="/tmp"))
    copy_grader(root)
    shutil.copy(PROBES, root / PROBES.name)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def run_probe(name: str, mode: str, env: dict[str, str] | None = None) -> dict:
    """Run a probe of sandbox_probes.py as ``mode`` ("root" or "user"); its JSON result."""
    full_env = {**os.environ, **SECRETS, **(env or {})}
    if mode == "root":
        cmd = [sys.executable, str(PROBES), str(PROJECT_ROOT), name]
        cwd = PROJECT_ROOT
    else:
        if USER_MODE:
            pytest.skip(f"cannot run as an unprivileged user: {USER_MODE}")
        root = copy = _public_copy_of_grader()
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
               "/usr/bin/python3", "-I", str(root / PROBES.name), str(root), name]
        cwd = root
        full_env = {**full_env, "HOME": "/tmp", "GRADER_CACHE_DIR": "/tmp/grader-cache-nobody"}
        full_env.pop("PYTHONPATH", None)
    try:
        done = subprocess.run(cmd, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=180)
    finally:
        if mode != "root":
            shutil.rmtree(copy, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in result, result.get("error")
    return result


MODES = ["root", "user"] if os.geteuid() == 0 else ["user"]


def _as(mode: str) -> str:
    return "root" if mode == "root" and os.geteuid() == 0 else "user"


# ------------------------------------------------------------------ 1. no escape from the sandbox


@needs_sandbox
@pytest.mark.parametrize("mode", MODES)
def test_the_sandbox_keeps_no_capability_and_no_device_but_the_gpus(mode):
    seen = run_probe("escape", _as(mode))
    assert seen["cap_eff"] == "0000000000000000" and seen["cap_prm"] == "0000000000000000", seen
    assert seen["mount"] != "ALLOWED", seen["mount"]
    assert seen["open_by_handle_at"] != "ALLOWED", seen["open_by_handle_at"]
    allowed_dev = {"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
                   "urandom", "zero"}
    assert {d for d in seen["dev"] if not d.startswith("nvidia")} <= allowed_dev, seen["dev"]
    assert "shadow" not in seen["etc"] and "READABLE" not in seen["/etc/shadow"], seen
    assert "READABLE" not in seen["/etc/hostname"]
    # of /opt, only NVIDIA's tools and the folder Python lives in (if there) are visible
    python_opt = {Path(p).parts[2] for p in (sys.prefix, sys.base_prefix) if Path(p).parts[1:2] == ("opt",)}
    if "READABLE" in seen["/opt"]:
        assert set(seen["/opt"].removeprefix("READABLE: ").split(",")) <= {"nvidia", *python_opt}, seen["/opt"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the control needs root")
def test_the_control_open_by_handle_at_reads_any_file_as_root_outside_the_sandbox(tmp_path):
    """What the sandbox denies above is a real attack: root with its capabilities opens any file
    from a handle."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(8 + 128)
    struct.pack_into("I", buf, 0, 128)
    mount_id = ctypes.c_int()
    assert libc.name_to_handle_at(-100, b"/usr/bin/env", buf, ctypes.byref(mount_id), 0) == 0
    fd = libc.open_by_handle_at(os.open("/usr", os.O_RDONLY), buf, os.O_RDONLY)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    os.close(fd)


# ------------------------------------------------------------------ 2. trusted runs import only the grader


@pytest.mark.parametrize("mode", MODES)
def test_a_trusted_run_imports_nothing_planted_in_its_folder_or_on_pythonpath(mode):
    if _as(mode) == "user" and subprocess.run(["/usr/bin/python3", "-c", "import numpy"], capture_output=True).returncode:
        pytest.skip("the system Python has no numpy (Debian: python3-numpy), which the worker imports")
    seen = run_probe("trusted_import", _as(mode))
    assert seen["planted ran the old way"], "the control: `python -m` in that folder runs the planted package"
    assert seen["ours"] and seen["returncode"] == 2, seen


@pytest.mark.parametrize("mode", MODES)
def test_the_read_only_copy_of_the_worker_is_removed_when_the_grader_exits(mode):
    """Its folders are read-only: a grader that is not root must make them writable to remove them."""
    if _as(mode) == "user" and subprocess.run(["/usr/bin/python3", "-c", "import numpy"], capture_output=True).returncode:
        pytest.skip("the system Python has no numpy (Debian: python3-numpy), which the grader imports")
    seen = run_probe("runtime", _as(mode))
    assert seen["runtime"].startswith(tempfile.gettempdir()) and seen["read only"], seen
    assert not Path(seen["runtime"]).exists()


# ------------------------------------------------------------------ 4. links planted where runs can write


@needs_sandbox
@pytest.mark.parametrize("mode", MODES)
def test_links_planted_by_a_run_are_neither_written_through_nor_read(mode):
    seen = run_probe("plant", _as(mode))
    assert seen["replace input"] != "ALLOWED" and seen["input intact"], seen
    assert seen["write job"] != "ALLOWED", seen
    assert seen["plant output link"] == "ALLOWED" and seen["plant result link"] == "ALLOWED", seen
    assert seen["read output"].startswith("refused") and "symbolic link" in seen["read output"], seen
    assert seen["read result"].startswith("refused"), seen
    assert seen["write through link"].startswith("refused") and seen["secret intact"], seen


def test_reads_below_a_writable_folder_follow_no_link_at_any_depth(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "P.npy").write_bytes(b"x" * 10)
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    assert read_beneath(tmp_path, "real/P.npy", 100) == b"x" * 10
    with pytest.raises(GraderError, match="its folder 'linked' is a symbolic link"):
        read_beneath(tmp_path, "linked/P.npy", 100)
    with pytest.raises(GraderError, match="at most 5 bytes"):
        read_beneath(tmp_path, "real/P.npy", 5)
    with pytest.raises(GraderError, match="not a path inside"):
        read_beneath(tmp_path, "../etc/passwd", 100)


# ------------------------------------------------------------------ 3 and 7. submissions are regular files


def _repo_with(tmp_path: Path, lab: str, make) -> Path:
    repo = tmp_path / "repo"
    folder = repo / "labs" / lab
    folder.mkdir(parents=True)
    make(folder / "student.cu", folder)
    return repo


REFERENCE = find_lab("tiled_matmul").files.reference


@pytest.mark.parametrize("how,why", [
    ("absolute link to the reference", "is a symbolic link"),
    ("relative link to the reference", "is a symbolic link"),
    ("link to /proc/self/environ", "is a symbolic link"),
    ("link to /etc/shadow", "is a symbolic link"),
    ("folder that is a link", "its folder 'tiled_matmul' is a symbolic link"),
    ("FIFO", "is a FIFO (named pipe)"),
    ("too large", f"may be at most {SOURCE_LIMIT_BYTES:,} bytes"),
])
def test_grade_repo_refuses_a_submission_that_is_not_a_regular_file_inside_the_repo(tmp_path, monkeypatch, how, why):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)

    def make(path: Path, folder: Path) -> None:
        if how == "absolute link to the reference":
            path.symlink_to(REFERENCE)
        elif how == "relative link to the reference":
            path.symlink_to(os.path.relpath(REFERENCE, folder))
        elif how == "link to /proc/self/environ":
            path.symlink_to("/proc/self/environ")
        elif how == "link to /etc/shadow":
            path.symlink_to("/etc/shadow")
        elif how == "folder that is a link":  # to a folder whose student.cu is the reference
            course = tmp_path / "course"
            course.mkdir()
            shutil.copy(REFERENCE, course / "student.cu")
            folder.rmdir()
            folder.symlink_to(course)
        elif how == "FIFO":
            os.mkfifo(path)
        else:
            path.write_bytes(b"// padding\n" * (SOURCE_LIMIT_BYTES // 10))

    repo = _repo_with(tmp_path, "tiled_matmul", make)
    out = tmp_path / "out"
    code = cli_main(["grade-repo", str(repo), "--lab", "tiled_matmul", "--no-gpu", "--out", str(out), "-q"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    first = report["labs"][0]["checks"][0]
    assert first["id"] == "compile" and first["outcome"] == "error"
    assert first["message"].startswith("labs/tiled_matmul/student.cu ") and why in first["message"], first["message"]
    assert report["score"] == 0
    reference_text = REFERENCE.read_text()
    for name in ("report.json", "report.xml", "report.md"):
        text = (out / name).read_text()
        assert not any(secret in text for secret in SECRETS.values()), name
        assert "__shared__" not in text and reference_text[:200] not in text, name


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "link to /dev/zero"])
def test_grading_a_single_file_that_is_a_fifo_or_a_device_is_an_input_error_not_a_hang(tmp_path, target, capsys):
    path = tmp_path / "student.cu"
    if target == "fifo":
        os.mkfifo(path)
    elif target == "/dev/zero":
        path = Path("/dev/zero")
    else:
        path.symlink_to("/dev/zero")
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("code", cli_main(["grade", "tiled_matmul", str(path), "--no-gpu", "-q"])))
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "grading hung on a file that never ends"
    assert done["code"] == 2
    err = capsys.readouterr().err
    assert str(path) in err and ("FIFO" in err or "device" in err or "symbolic link" in err), err


def test_a_source_file_is_read_only_up_to_its_cap(tmp_path):
    big = tmp_path / "big.cu"
    with open(big, "wb") as fh:
        fh.truncate(SOURCE_LIMIT_BYTES + 1)
    with pytest.raises(GraderError, match="at most"):
        read_file(big, SOURCE_LIMIT_BYTES)


def test_compiler_output_is_read_through_a_cap(tmp_path):
    """A tiny source whose compiler output is huge: a #warning at every level of a recursive
    include of itself, under a long #line name, prints the whole include stack each time."""
    long_name = "x" * 2000
    src = tmp_path / "student.cu"
    src.write_text(
        f'#line 1 "{long_name}"\n'
        "#warning this line is printed with the whole include stack, at every level\n"
        '#if __INCLUDE_LEVEL__ < 150\n#include "student.cu"\n#endif\n'
        'extern "C" void matmul(const float*, const float*, float*, int) {}\n'
    )
    spec = find_lab("tiled_matmul")
    build = nvcc.build(src, spec.files.header, ("sm_90",), exports=("matmul",), sandbox=SANDBOX, time_limit_s=120,
                       cache_dir=tmp_path / "cache")
    assert not build.timed_out
    assert len(build.log) <= 9_000 and "omitted]" in build.log, build.log[-500:]


def test_the_compiler_runner_keeps_only_the_ends_of_100_mb(tmp_path):
    flood = ["sh", "-c", 'head -c 100000000 /dev/zero | tr "\\0" w; echo; echo compiler-done']
    text, code = nvcc._run_compiler(flood, tmp_path, 120)
    assert code == 0
    assert len(text) <= nvcc.COMPILE_OUTPUT_HEAD_BYTES + nvcc.COMPILE_OUTPUT_TAIL_BYTES + 100
    assert "bytes of output omitted" in text and text.rstrip().endswith("compiler-done")


# ------------------------------------------------------------------ 5. no secret reaches student code


@pytest.mark.parametrize("sandboxed", [True, False])
def test_no_secret_reaches_the_compiler_and_stdin_is_closed(tmp_path, monkeypatch, sandboxed):
    if sandboxed and not SANDBOX.active:
        pytest.skip(f"no sandbox here: {SANDBOX.reason}")
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    src = tmp_path / "student.cu"
    src.write_text('#include "/proc/self/environ"\n#include "/dev/stdin"\n'
                   'extern "C" void matmul(const float*, const float*, float*, int) {}\n')
    spec = find_lab("tiled_matmul")
    read_end, write_end = os.pipe()  # the grader's stdin: an open pipe that holds a secret
    os.write(write_end, b"piped-secret-99\n")
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        build = nvcc.build(src, spec.files.header, ("sm_90",), exports=("matmul",), time_limit_s=60,
                           sandbox=SANDBOX if sandboxed else None, cache_dir=tmp_path / "cache")
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    text = build.message + build.log
    assert not build.timed_out and build.seconds < 50, "the compile waited on the grader's stdin"
    assert not any(secret in text for secret in [*SECRETS.values(), "piped-secret-99"]), text


@needs_sandbox
@pytest.mark.parametrize("mode", MODES)
def test_no_secret_reaches_a_worker_in_the_sandbox(mode):
    seen = run_probe("escape", _as(mode))
    blob = json.dumps(seen["environ"]) + seen["pid1_environ"]
    assert not any(secret in blob for secret in SECRETS.values()), blob
    assert not set(seen["environ"]) & set(SECRETS)


def test_the_worker_environment_is_allow_listed(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    env = worker_env({"GRADER_NO_POOL": "1"})
    assert not set(env) & set(SECRETS) and "PYTHONPATH" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["GRADER_NO_POOL"] == "1"
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_a_gpu_setting_the_host_made_itself_is_kept(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    assert worker_env()["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"


# ------------------------------------------------------------------ 9. the profiler's report is out of reach


def test_a_worker_closes_the_profilers_log_pipe_before_student_code_runs():
    read_end, write_end = os.pipe()
    code = ("import os, sys\nsys.path.insert(0, sys.argv[1])\nfrom grader.worker.confine import close_tool_log\nclose_tool_log()\n"
            f"try:\n    os.write({write_end}, b'FORGED ROW\\n')\n    print('WROTE')\nexcept OSError as exc:\n    print(exc.errno)\n")
    env = {**os.environ, "GRADER_CLOSE_FD": f"{write_end}:{os.fstat(write_end).st_ino}"}
    done = subprocess.run([sys.executable, "-I", "-c", code, str(PROJECT_ROOT)], env=env, pass_fds=(write_end,),
                          capture_output=True, text=True, timeout=60)
    os.close(write_end)
    assert done.stdout.strip() == "9", done.stdout + done.stderr  # EBADF
    assert os.read(read_end, 100) == b""
    os.close(read_end)


@pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")
def test_in_its_landlock_domain_a_worker_cannot_open_the_profilers_files():
    """/proc/PID/fd of the process that watches it (its log pipe) and /proc/PID/mem are out of reach."""
    read_end, write_end = os.pipe()
    code = ("import os, sys\nsys.path.insert(0, sys.argv[1])\nfrom grader.worker.confine import enter_landlock_domain\n"
            "print(enter_landlock_domain() if sys.argv[2] == 'confined' else 'open')\n"
            "for path in (f'/proc/{os.getppid()}/fd/' + sys.argv[3], f'/proc/{os.getppid()}/mem'):\n"
            "    try:\n        os.close(os.open(path, os.O_WRONLY))\n        print('OPENED')\n"
            "    except OSError as exc:\n        print(exc.errno)\n")
    outs = {}
    for how in ("control", "confined"):
        done = subprocess.run([sys.executable, "-I", "-c", code, str(PROJECT_ROOT), how, str(write_end)],
                              capture_output=True, text=True, timeout=60)
        outs[how] = done.stdout.split()
    os.close(read_end), os.close(write_end)
    assert outs["control"][:2] == ["open", "OPENED"], outs  # the attack works outside a domain
    assert outs["confined"][0] == "True" and "OPENED" not in outs["confined"], outs


def test_a_student_time_below_the_graders_round_trip_is_raised_to_it():
    # trusted calls: round trips exceed their wall times by at most 0.2 ms
    trusted = [([5.0, 5.1, 4.9], [5.15, 5.3, 5.05])]
    honest = [2.0, 2.1]
    assert bound_by_round_trips(honest, [2.2, 2.3], trusted) == 0 and honest == [2.0, 2.1]
    forged = [0.001, 2.0]
    assert bound_by_round_trips(forged, [2.2, 2.3], trusted) == 1
    assert forged[0] == pytest.approx(2.2 * 0.98 - 0.2 - 0.25) and forged[1] == 2.0


def test_a_long_honest_call_is_not_taken_for_a_forged_one():
    # a 62 ms kernel: its worker wakes later after the long wait than after the baselines' 5 ms calls
    trusted = [([5.0, 5.1, 4.9], [5.15, 5.3, 5.05])]
    honest = [61.76, 61.80]
    assert bound_by_round_trips(honest, [62.4, 62.6], trusted) == 0 and honest == [61.76, 61.80]
    assert bound_by_round_trips([50.0], [62.4], trusted) == 1  # 20% below its round trip is not slack


# ------------------------------------------------------------------ 10. smaller ones


def test_a_file_named_like_an_option_is_compiled_as_a_file(tmp_path):
    src = tmp_path / "-DX.cu"
    src.write_text('extern "C" void matmul(const float*, const float*, float*, int) {}\n')
    report = grade(find_lab("tiled_matmul"), src, GradeOptions(gpu=False), display_name="-DX.cu")
    first = report.checks[0]
    assert first.id == "compile" and first.outcome is Outcome.PASS, first.message


@needs_sandbox
def test_the_compiler_in_the_sandbox_sees_no_host_etc(tmp_path):
    src = tmp_path / "student.cu"
    src.write_text('#include "/etc/shadow"\nextern "C" void matmul(const float*, const float*, float*, int) {}\n')
    spec = find_lab("tiled_matmul")
    build = nvcc.build(src, spec.files.header, ("sm_90",), exports=("matmul",), sandbox=SANDBOX, cache_dir=tmp_path / "c")
    assert not build.ok and "/etc/shadow" in build.message and "No such file or directory" in build.message, build.message


def test_the_installed_command_ignores_a_grader_package_in_the_current_folder(tmp_path):
    """Inside a student's repository, `cuda-grader` must run the installed grader, not theirs."""
    exe = shutil.which("cuda-grader")
    if exe is None:
        pytest.skip("cuda-grader is not installed (pip install -e .)")
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "__init__.py").write_text("print('PLANTED GRADER RAN')\n")
    (tmp_path / "grader" / "cli.py").write_text("def main():\n    print('PLANTED GRADER RAN')\n")
    done = subprocess.run([exe, "labs"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ""})
    assert "PLANTED" not in done.stdout + done.stderr and "tiled_matmul" in done.stdout, done.stdout + done.stderr


def test_landlock_and_seccomp_leave_the_process_working():
    code = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom grader.worker.confine import confine\nconfine()\n"
            "import threading\nt = threading.Thread(target=print, args=('thread ok',)); t.start(); t.join()\n"
            "print(open('/proc/self/status').read().count('\\n') > 5)\n")
    done = subprocess.run([sys.executable, "-I", "-c", code, str(PROJECT_ROOT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["thread", "ok", "True"], done.stdout + done.stderr



# ------------------------------------------------------------------ 8. only kernels that ran are judged


def test_placement_checks_judge_only_the_kernels_that_ran(tmp_path):
    """A decoy kernel with a __constant__ mask and a shared tile, never launched, earns nothing once
    the kernels that ran are known (the GPU run records them); without that record it would."""
    from grader.checks.sass import static_checks

    spec = find_lab("memory_types")
    decoy = spec.root / "solutions" / "wrong" / "unlaunched_decoy.cu"
    build = nvcc.build(decoy, spec.files.header, ("sm_90",), exports=("conv1d",), cache_dir=tmp_path / "c")
    assert build.ok, build.message
    names = {k.name for k in build.kernels}
    ran = {n for n in names if n.startswith("conv1d_global")}
    assert len(names) == 2 and len(ran) == 1, names
    wanted = ("mask_in_constant_memory", "input_tile_in_shared_memory")
    whole_file = {c.id: c for c in static_checks(spec, build.library)}
    assert all(whole_file[w].outcome is Outcome.PASS for w in wanted), "the control: the decoy fools a file-wide check"
    judged = {c.id: c for c in static_checks(spec, build.library, build.kernels, ran)}
    for w in wanted:
        assert judged[w].outcome is Outcome.FAIL and "judged on the kernels that ran: conv1d_global(" in judged[w].message
    assert judged["no_local_memory"].outcome is Outcome.PASS



def test_arrays_a_worker_wrote_are_read_as_written_and_never_beyond_their_limit(tmp_path):
    import numpy as np

    from grader.host.safeio import UnsafeFile, load_npy

    for array in (np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.arange(12.0).reshape(3, 4)),
                  np.array(3.5), np.zeros((0, 5)), np.arange(7, dtype=np.uint8)):
        np.save(tmp_path / "a.npy", array)
        got = load_npy(tmp_path, "a.npy", 1 << 20)
        assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array)
        assert got.flags.f_contiguous == array.flags.f_contiguous
    np.save(tmp_path / "objects.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UnsafeFile, match="Python objects"):
        load_npy(tmp_path, "objects.npy", 1 << 20)
    # a small file whose header claims 4 TB: refused before anything of that size is allocated
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    (tmp_path / "huge.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 64)
    with pytest.raises(UnsafeFile, match="header declares 4,398,046,511,104 bytes"):
        load_npy(tmp_path, "huge.npy", 1 << 20)
    np.save(tmp_path / "cut.npy", np.ones(1000, np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:-4])
    with pytest.raises(UnsafeFile, match="data ends before the 4,000 bytes"):
        load_npy(tmp_path, "cut.npy", 1 << 20)
    os.symlink(tmp_path / "a.npy", tmp_path / "link.npy")
    with pytest.raises(UnsafeFile):
        load_npy(tmp_path, "link.npy", 1 << 20)
