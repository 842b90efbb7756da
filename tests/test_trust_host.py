"""Shared state on a host is the grader user's own, or refused: locks, caches, and what one CI job
could leave for the next.

The attacks are played for real: where the tests run as root and ``useradd`` exists, a second,
unprivileged user is made for the test (and removed after) and plants what an attacker would.
Without root those tests skip with the reason; the ones that need one user run either way.
A refusal is a ``GraderError`` (shown as a message that names the path and the fix, no traceback).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from importable import copy_grader

from grader.checks import compare
from grader.checks.counters import ncu as counters
from grader.errors import GraderError
from grader.host import gpulock
from grader.isolation.build import lab_build
from grader.isolation.options import GradeOptions, kernel_cache
from grader.labspec.labs import find_lab

ROOT = Path(__file__).resolve().parent.parent
RUNNER_CLEAN = ROOT / "ci" / "runner" / "runner-clean"
KEY = "GPU-1111aaaa-22bb"


# ------------------------------------------------------------------ a second user


class User:
    def __init__(self, name: str) -> None:
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid

    def cmd(self, *args: str) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", *args]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(*args), capture_output=True, text=True, timeout=60, cwd="/",
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"})


def _why_no_second_user() -> str:
    if os.geteuid() != 0:
        return "needs root to make a second user (runs as root in CI)"
    for tool in ("useradd", "userdel", "setpriv"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return ""


@pytest.fixture
def other_user():
    why = _why_no_second_user()
    if why:
        pytest.skip(why)
    name = f"gt{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield User(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        if shutil.which("crontab"):
            subprocess.run(["crontab", "-r", "-u", name], capture_output=True)
        subprocess.run(["userdel", "-f", name], capture_output=True)


@pytest.fixture
def public_dir():
    """A folder that another user can reach (the test's own tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="grader-trust-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _victim(folder: Path) -> Path:
    """A file of the grader's user that an attacker would like made writable."""
    victim = folder / "shadow"
    victim.write_text("root:secret\n")
    victim.chmod(0o600)
    return victim


def _untouched(victim: Path) -> bool:
    return victim.read_text() == "root:secret\n" and victim.stat().st_mode & 0o777 == 0o600


# ------------------------------------------------------------------ locks


def test_another_users_gpu_folder_in_tmp_with_a_linked_lock_is_neither_used_nor_followed(
        other_user, public_dir, monkeypatch):
    """Attack 1: a user makes the GPU's lock folder in /tmp first (theirs, mode 1777) with the
    locks as links to a root file; the root grader used to fchmod that file to 0666."""
    systmp = public_dir / "tmp"
    systmp.mkdir()
    systmp.chmod(0o1777)  # like /tmp
    victim = _victim(public_dir)
    planted = systmp / f"cuda-grader-gpu-{KEY}"
    proc = other_user.run("/bin/sh", "-c", f"mkdir '{planted}' && chmod 1777 '{planted}' && "
                          f"ln -s '{victim}' '{planted}/grader-ncu.lock' && ln -s '{victim}' '{planted}/grader-gpu.lock'")
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setattr(tempfile, "tempdir", str(systmp))
    monkeypatch.setenv("XDG_CACHE_HOME", str(public_dir / "rootcache"))
    monkeypatch.delenv("GRADER_LOCK_DIR", raising=False)
    from grader.host.gpu import GpuInfo

    with gpulock.profiling_lock(2, gpulock.lock_folder(GpuInfo("H100", (9, 0), "580", 0, KEY))):
        pass
    assert _untouched(victim)  # the old grader made it mode 0666 here
    with gpulock.gpu_lock(gpulock.gpu_folder(KEY)):
        pass
    assert _untouched(victim)
    place = gpulock.gpu_folder(KEY)
    assert place.folder == public_dir / "rootcache" / "cuda-lab-grader" / "locks"
    assert place.folder.stat().st_uid == os.geteuid() and place.folder.stat().st_mode & 0o777 == 0o700


def test_a_linked_lock_file_is_refused_with_a_message_not_followed(tmp_path):
    """The same planted link in the grader's own lock folder: refused, and the message says what to remove."""
    locks = tmp_path / "locks"
    place = gpulock.gpu_folder(KEY, base=locks)
    victim = _victim(tmp_path)
    place.path(gpulock.PROFILER_LOCK).symlink_to(victim)
    with pytest.raises(GraderError) as err:
        with gpulock.profiling_lock(1, place):
            pass
    assert "symbolic link" in str(err.value) and str(place.path(gpulock.PROFILER_LOCK)) in str(err.value)
    assert "rm -f" in str(err.value)
    assert _untouched(victim)
    # the counters check says so and is skipped, rather than the grade failing with a trace
    run, why = counters.run_when_counters_free(lambda limit: pytest.fail("ran without the lock"), 5, folder=place)
    assert run is None and "symbolic link" in why


def test_a_lock_folder_another_user_can_write_is_refused(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    locks.chmod(0o777)
    with pytest.raises(GraderError, match=r"can be written by other users \(mode 0777\).*chmod 700"):
        gpulock.gpu_folder(KEY, base=locks)


def test_a_lock_folder_of_another_user_is_refused(other_user, public_dir, monkeypatch):
    cache = public_dir / "cache"
    cache.mkdir()
    os.chown(cache, other_user.uid, other_user.gid)
    assert other_user.run("/bin/mkdir", "-m", "0700", "-p", str(cache / "cuda-lab-grader" / "locks")).returncode == 0
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("GRADER_LOCK_DIR", raising=False)
    with pytest.raises(GraderError, match=f"belongs to {other_user.name}"):
        gpulock.gpu_folder(KEY)


HOLDER = textwrap.dedent("""
    import sys, time
    sys.path[:0] = sys.argv[3:]
    from pathlib import Path
    from grader.host.gpulock import gpu_folder, gpu_lock
    with gpu_lock(gpu_folder(sys.argv[1]), what="grading alice"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _hold(cmd: list[str], env: dict[str, str], seconds: float, path: list[str]) -> subprocess.Popen:
    holder = subprocess.Popen([*cmd, "-c", HOLDER, KEY, str(seconds), *path], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    assert holder.stdout is not None
    line = holder.stdout.readline().strip()
    if line != "held":
        holder.kill()
        pytest.fail(f"the holder did not take the lock: {holder.stderr.read() if holder.stderr else ''}")
    return holder


def test_a_held_gpu_lock_is_waited_for_a_bounded_time_and_the_holder_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GRADER_LOCK_DIR", raising=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = _hold([sys.executable], env, 60, [str(ROOT)])
    heard: list[str] = []
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError) as err:
            with gpulock.gpu_lock(gpulock.gpu_folder(KEY), poll_s=0.05, wait_s=1.0, notify=heard.append):
                pass
        assert time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert isinstance(err.value, GraderError)  # a message, no traceback
    assert f"for the GPU lock held by pid {holder.pid} ({me}, since " in str(err.value)
    assert "grading alice" in str(err.value) and "gave up" in str(err.value)
    assert heard and heard[0].startswith(f"waiting for the GPU lock held by pid {holder.pid} ({me}, since ")


def _importable_copy(folder: Path) -> list[str]:
    """The grader and its libraries copied where another user can import them from."""
    lib = copy_grader(folder / "pylib")
    for dirpath, _, filenames in os.walk(lib):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return [str(lib)]


def test_another_user_holding_the_shared_gpu_lock_makes_root_wait_a_bounded_time(other_user, public_dir, monkeypatch):
    """With an administrator's shared lock folder, another user's grader holds the GPU: root's
    waits, names that user and pid, and gives up at the bound instead of waiting forever."""
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no system Python at /usr/bin/python3 for the other user")
    shared = public_dir / "locks"
    shared.mkdir()
    shared.chmod(0o1777)
    path = _importable_copy(public_dir)
    env = {"PATH": "/usr/bin:/bin", "GRADER_LOCK_DIR": str(shared), "HOME": "/nonexistent"}
    holder = _hold(other_user.cmd("/usr/bin/python3", "-I"), env, 60, path)
    monkeypatch.setenv("GRADER_LOCK_DIR", str(shared))
    try:
        with pytest.raises(TimeoutError) as err:
            with gpulock.gpu_lock(gpulock.gpu_folder(KEY), poll_s=0.05, wait_s=1.0):
                pass
        held = json.loads((shared / f"{KEY}.grader-gpu.lock.{other_user.uid}.holder").read_text())
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert f"held by pid {held['pid']} ({other_user.name}, since " in str(err.value)


def test_a_shared_lock_folder_must_be_roots_and_sticky(other_user, public_dir, monkeypatch):
    shared = public_dir / "locks"
    shared.mkdir()
    os.chown(shared, other_user.uid, other_user.gid)
    monkeypatch.setenv("GRADER_LOCK_DIR", str(shared))
    with pytest.raises(GraderError, match=f"belongs to {other_user.name}"):
        gpulock.gpu_folder(KEY)
    os.chown(shared, 0, 0)
    shared.chmod(0o777)
    with pytest.raises(GraderError, match="not a sticky folder of root's"):
        gpulock.gpu_folder(KEY)
    shared.chmod(0o1777)
    victim = _victim(public_dir)
    lock = gpulock.gpu_folder(KEY).path(gpulock.LOCK_NAME)
    assert other_user.run("/bin/ln", "-s", str(victim), str(lock)).returncode == 0
    with pytest.raises(GraderError, match="symbolic link"):
        with gpulock.gpu_lock(gpulock.gpu_folder(KEY), wait_s=1):
            pass
    assert _untouched(victim)


# ------------------------------------------------------------------ caches


LAB = "memory_types"


def _built(cache: Path):
    spec = find_lab(LAB)
    return spec, lab_build(spec, spec.baseline_source("reference"), ("sm_90",), cache)


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc is not installed")


@needs_nvcc
def test_a_build_cache_another_user_owns_is_refused_not_trusted(other_user, tmp_path):
    """Attack 6: a user who can write --cache-dir puts a shared object where the key of a course
    baseline says it is; the baselines' worker (as root) used to load it."""
    _, good = _built(tmp_path / "mine")
    assert good.ok and good.library is not None
    entry = good.library.parent
    theirs = tmp_path / "theirs"
    shutil.copytree(tmp_path / "mine", theirs, symlinks=True)
    planted = theirs / "builds" / entry.name / "lib.so"
    planted.write_bytes(b"\x7fELF planted")
    for dirpath, _, filenames in os.walk(theirs):
        os.chown(dirpath, other_user.uid, other_user.gid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), other_user.uid, other_user.gid)
    with pytest.raises(GraderError) as err:
        _built(theirs)
    assert f"belongs to {other_user.name}" in str(err.value) and str(theirs) in str(err.value)


@needs_nvcc
def test_a_planted_entry_in_the_graders_own_cache_is_not_loaded(other_user, tmp_path):
    """The cache folder is root's, but one entry (its folder and shared object) is another user's."""
    _, good = _built(tmp_path / "cache")
    assert good.library is not None
    entry = good.library.parent
    os.chown(entry, other_user.uid, other_user.gid)
    os.chown(good.library, other_user.uid, other_user.gid)
    with pytest.raises(GraderError, match=f"a build cache entry belongs to {other_user.name}"):
        _built(tmp_path / "cache")
    os.chown(entry, 0, 0)  # the folder root's again, the shared object still theirs
    with pytest.raises(GraderError, match=f"a cached shared object belongs to {other_user.name}"):
        _built(tmp_path / "cache")


@needs_nvcc
def test_a_linked_shared_object_in_a_cache_entry_is_refused(tmp_path):
    _, good = _built(tmp_path / "cache")
    assert good.library is not None
    elsewhere = tmp_path / "elsewhere.so"
    shutil.copy(good.library, elsewhere)
    good.library.unlink()
    good.library.symlink_to(elsewhere)
    with pytest.raises(GraderError, match="symbolic link"):
        _built(tmp_path / "cache")


def test_a_cache_folder_others_can_write_is_refused_with_the_fix(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(GraderError) as err:
        kernel_cache(GradeOptions(cache_dir=cache))
    assert str(cache) in str(err.value) and f"chmod 700 '{cache}'" in str(err.value)
    from grader.cli import main
    assert main(["grade", "--no-gpu", "--cache-dir", str(cache), LAB, "--stub"]) == 2  # an input error


def test_the_cli_refuses_another_users_cache_without_a_traceback(other_user, tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, other_user.uid, other_user.gid)
    from grader.cli import main
    assert main(["grade", "--no-gpu", "--cache-dir", str(cache), LAB, "--stub"]) == 2
    err = capsys.readouterr().err
    assert f"belongs to {other_user.name}" in err and str(cache) in err and "Traceback" not in err


def test_the_cupy_kernel_cache_of_another_user_is_refused(other_user, tmp_path):
    cache = tmp_path / "cache"
    (cache / "cupy-kernels").mkdir(parents=True)
    cache.chmod(0o700)
    os.chown(cache / "cupy-kernels", other_user.uid, other_user.gid)
    with pytest.raises(GraderError, match=f"the CuPy kernel cache belongs to {other_user.name}"):
        kernel_cache(GradeOptions(cache_dir=cache))


def test_a_planted_case_in_the_case_cache_is_not_believed(other_user, tmp_path):
    """Forged inputs or answers of the course's secret cases, put there by another user."""
    cache = tmp_path / "cache"
    key = "ab" + "0" * 62
    compare._cached(cache, key, lambda: {"x": np.arange(4.0)})  # the grader's own entry
    entry = cache / "cases" / "ab" / f"{key}.npz"
    assert entry.exists()
    with open(entry, "wb") as out:
        np.savez(out, x=np.full(4, 7.0))
    os.chown(entry, other_user.uid, other_user.gid)
    with pytest.raises(GraderError, match=f"a cached case belongs to {other_user.name}"):
        compare._cached(cache, key, lambda: {"x": np.arange(4.0)})


def test_a_linked_case_is_refused(tmp_path):
    cache = tmp_path / "cache"
    key = "cd" + "0" * 62
    compare._cached(cache, key, lambda: {"x": np.arange(4.0)})
    entry = cache / "cases" / "cd" / f"{key}.npz"
    forged = tmp_path / "forged.npz"
    np.savez(forged, x=np.full(4, 7.0))
    entry.unlink()
    entry.symlink_to(forged)
    with pytest.raises(GraderError, match="symbolic link"):
        compare._cached(cache, key, lambda: {"x": np.arange(4.0)})


# ------------------------------------------------------------------ the CI runner


def _runner_tools() -> str:
    for tool in ("crontab", "at", "atq", "ipcmk", "setsid", "pgrep"):
        if not shutil.which(tool):
            return f"{tool} is not installed (packages cron, at, util-linux, procps)"
    return ""


def _left(user: User) -> dict[str, object]:
    """What of ``user``'s a next job would find."""
    cron = subprocess.run(["crontab", "-l", "-u", user.name], capture_output=True, text=True).stdout
    at = [line for line in subprocess.run(["atq"], capture_output=True, text=True).stdout.splitlines()
          if line.split() and line.split()[-1] == user.name]
    ipc = {}
    for table in ("shm", "sem", "msg"):
        rows = Path(f"/proc/sysvipc/{table}").read_text().splitlines()
        cols = rows[0].split()
        ipc[table] = [r for r in rows[1:] if str(user.uid) in (r.split()[cols.index("uid")], r.split()[cols.index("cuid")])]
    table = subprocess.run(["ps", "-e", "-o", "pid=,euid=,ruid=,stat="], capture_output=True, text=True).stdout
    procs = [pid for pid, euid, ruid, state in (row.split() for row in table.splitlines())
             if str(user.uid) in (euid, ruid) and not state.startswith("Z")]  # a zombie runs nothing
    files = [p for p in Path("/tmp").iterdir() if p.lstat().st_uid == user.uid]
    return {"cron": cron.strip(), "at": at, **ipc, "procs": procs, "files": files}


def test_runner_clean_leaves_the_next_job_nothing_of_the_last(other_user, public_dir):
    """Attack 8: a student's job (as the runner's user) leaves a cron job, an at job, SysV IPC
    objects, a process outside the job and a file in /tmp; runner-clean removes all of them."""
    why = _runner_tools()
    if why:
        pytest.skip(why)
    loot = public_dir / "loot"
    user = other_user
    assert user.run("/bin/sh", "-c", f"echo '* * * * * cat /var/lib/*/home/* > {loot}' | crontab -").returncode == 0
    at = user.run("/bin/sh", "-c", f"echo 'cat /etc/hostname > {loot}' | at now + 1 hour")
    assert at.returncode == 0, at.stderr
    for made in (user.run("ipcmk", "-M", "4096"), user.run("ipcmk", "-S", "1"), user.run("ipcmk", "-Q")):
        assert made.returncode == 0, made.stderr
    # a process outside any job, its parent gone
    assert user.run("/bin/sh", "-c", "setsid --fork sleep 600 </dev/null >/dev/null 2>&1").returncode == 0
    assert user.run("/bin/sh", "-c", "echo left > /tmp/grader-trust-left-$(id -u)").returncode == 0
    before = _left(user)
    assert before["cron"] and before["at"] and before["shm"] and before["sem"] and before["msg"]
    assert before["procs"] and before["files"]

    proc = subprocess.run([str(RUNNER_CLEAN), user.name], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    after = _left(user)
    assert after == {"cron": "", "at": [], "shm": [], "sem": [], "msg": [], "procs": [], "files": []}


def test_runner_clean_refuses_root_and_unknown_users():
    proc = subprocess.run([str(RUNNER_CLEAN), "root"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and ("refusing to clean up after root" in proc.stderr or "must run as root" in proc.stderr)
    proc = subprocess.run([str(RUNNER_CLEAN), f"nosuch{uuid.uuid4().hex[:6]}"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "no such user" in proc.stderr


def test_every_job_is_cleaned_up_before_and_after():
    prepare = (ROOT / "ci" / "runner" / "runner-prepare").read_text()
    assert '/runner-clean" "$user"' in prepare
    unit = (ROOT / "ci" / "runner" / "cuda-grader-runner@.service").read_text()
    assert "ExecStopPost=+/usr/local/libexec/cuda-grader/runner-clean ghrunner-%i" in unit
    setup = (ROOT / "ci" / "runner" / "setup-runner.sh").read_text()
    assert '"$here/runner-clean" "$LIBEXEC/runner-clean"' in setup
