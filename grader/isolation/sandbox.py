"""Running untrusted steps (compiling and running a submission) inside bubblewrap.

Inside the sandbox there is no network, the system is read-only, and only what a step needs is
visible: the system's own folders, Python and its packages, the grader's small worker runtime,
the files handed in and one writable scratch folder. The project (labs, references, grader
sources), the build cache, home folders and other submissions are not there. GPU device nodes
are passed with ``--dev-bind`` (CUDA fails with a plain bind or a fresh /dev).

Where bubblewrap is missing or cannot run, steps of a single grading run unsandboxed and reports
say so; a class run refuses to grade instead (:func:`refusal`), unless the sandbox was turned off.
"""

from __future__ import annotations

import atexit
import compileall
import contextlib
import dataclasses
import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ..cachedirs import default_cache_dir
from ..context import current, entered
from ..labspec.paths import PROJECT_ROOT, labs_dir_if_any

#: Folders of the system that every step may read (symlinks such as /lib -> usr/lib are kept).
#: Of /opt only NVIDIA's tools (Nsight Compute): the rest stays out (runner installs, secrets).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/nvidia")
#: What of /etc a step may read: the dynamic loader's configuration, the alternatives links that
#: compilers and CUDA are found through, and the public user and group lists. Never /etc itself:
#: as root a step could read shadow, host keys and credentials there.
ETC_ALLOWED = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
               "localtime", "os-release", "nvidia")
#: The GPU's device nodes; every other device is left out (bwrap's own /dev has null, zero, ...).
GPU_DEVICE_GLOB = "/dev/nvidia*"  # nvidia0..N, nvidiactl, nvidia-uvm(-tools), nvidia-caps
#: What of the grader's environment reaches an untrusted step (the compiler, a worker, a tool): the
#: locale, the search path and the CUDA runtime's own settings, nothing else. Everything else
#: (GRADER_SECRET, GITHUB_TOKEN, cloud credentials, ...) stays with the grader.
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "LD_LIBRARY_PATH")
ENV_ALLOWED_PREFIXES = ("CUDA_", "CUPY_", "NVIDIA_", "NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")
#: The hardware queues of each CUDA context in every process the grader starts, where the host
#: has not set ``CUDA_DEVICE_MAX_CONNECTIONS`` itself. Eight contexts starting at once on one GPU
#: took 0.71 s each rather than 1.32 s (two H200s, ``benchmarks/context_starts.py``), and a class's
#: workers start that way; the labs' code and the grader's own launch on one stream, which this
#: does not slow.
CONTEXT_QUEUES = "1"
TMP_SIZE_BYTES = 512 << 20  # the sandbox's private /tmp
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap) to sandbox submissions"
#: What a host needs for the sandbox to start: bubblewrap, and new namespaces allowed to it. A
#: container runtime's default seccomp profile (Kubernetes' RuntimeDefault, Docker's) and its
#: AppArmor profile refuse them, as do hosts that turn unprivileged user namespaces off.
HOST_NEEDS = ("the host needs bubblewrap installed (Debian/Ubuntu: apt-get install bubblewrap) and allowed to create "
              "namespaces: unprivileged user namespaces on (sysctl user.max_user_namespaces above 0, "
              "kernel.unprivileged_userns_clone=1 where it exists, kernel.apparmor_restrict_unprivileged_userns=0 or an "
              "AppArmor profile for bwrap that allows userns) and, in a container, no seccomp or AppArmor profile that "
              "refuses them (Kubernetes: seccompProfile Unconfined or a Localhost profile that allows them, and AppArmor "
              "unconfined, as ci/kubernetes/grade-class-job.yaml sets)")


#: How ``Sandbox.describe`` ends where there is no sandbox (a class's gradebook reads it back).
NONE_TAIL = "; the submission ran without a sandbox"

#: bubblewrap's flags that stop the sandbox from creating user namespaces of its own (0.8 and newer).
NO_USERNS_ARGS = ("--unshare-user", "--disable-userns")


@dataclass(frozen=True)
class Sandbox:
    bwrap: str | None  # None: steps run unsandboxed
    version: str = ""
    reason: str = ""  # why there is no sandbox
    userns_blocked: bool = False  # the sandbox cannot create user namespaces of its own
    userns_note: str = ""  # why it can, where it can
    turned_off: bool = False  # by choice (--no-sandbox, GRADER_SANDBOX=off), not for want of bubblewrap

    @property
    def active(self) -> bool:
        return self.bwrap is not None

    def describe(self) -> str:
        if self.active:
            text = f"bubblewrap {self.version}: no network, read-only system, only scratch and the submission's build visible"
            return text if self.userns_blocked else f"{text}; new user namespaces allowed ({self.userns_note})"
        return f"none: {self.reason}{NONE_TAIL}"

    def wrap(self, cmd: list[str], *, read_only: Iterable[Path] = (), writable: Iterable[Path] = (),
             cwd: Path | None = None, hide: Iterable[Path] = ()) -> list[str]:
        """``cmd`` inside the sandbox, or unchanged where there is none.

        Paths keep their names inside, so nothing has to be translated. ``hide`` adds folders
        to keep out beyond the course, the grader's checkout, the build cache and the home folder.
        """
        if not self.active:
            return list(cmd)
        assert self.bwrap is not None
        args = [self.bwrap, *_base_args(self.userns_blocked)]
        args += _mounts(tuple(map(str, read_only)), tuple(map(str, writable)),
                        tuple(str(Path(p).resolve()) for p in hide) + _course_dirs() + kept_out_now())
        if cwd is not None:
            args += ["--chdir", str(cwd)]
        return [*args, "--", *cmd]


def _private_dirs(extra: tuple[str, ...]) -> list[str]:
    dirs = [PROJECT_ROOT, default_cache_dir(), Path.home(), *map(Path, extra)]
    return sorted({str(Path(d).resolve()) for d in dirs})


def _course_dirs() -> tuple[str, ...]:
    """The labs graded with (wherever ``--labs`` or the search found them), and the course
    checkout or course bundle they are part of (references and known solutions sit beside
    ``labs/``; a bundle has its ``bundle.yaml`` there)."""
    found = labs_dir_if_any()
    if found is None:
        return ()
    labs = found.resolve()
    course = labs.parent
    beside = any((course / name).exists() for name in ("reference", "pyproject.toml", "bundle.yaml"))
    return (str(labs), str(course)) if beside and str(course) not in _NEVER_HIDDEN else (str(labs),)


@contextlib.contextmanager
def kept_out(paths: Iterable[Path]) -> Iterator[None]:
    """Keep ``paths`` (a class's student folders) out of every sandbox the run starts meanwhile
    (the threads it hands its context included; a process of its own, such as a GPU lane, takes
    them with the rest of its context: ``grader.isolation.inherit``)."""
    run = current()
    with entered(dataclasses.replace(run, kept_out=tuple(sorted({os.path.realpath(p) for p in paths} | set(run.kept_out))))):
        yield


def kept_out_now() -> tuple[str, ...]:
    """What the run keeps out of its sandboxes now, beyond the course and the grader's own folders."""
    return current().kept_out


#: Never covered, even when a course or a class lives right there: the system itself.
_NEVER_HIDDEN = frozenset({"/", "/usr", "/usr/local", "/opt", "/etc", "/home", "/tmp", "/var", "/srv", "/mnt"})


def _python_dirs() -> list[str]:
    """Where the interpreter and its packages live (a virtual environment may sit in the project)."""
    root = str(PROJECT_ROOT.resolve())
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and (real == sys.prefix or "-packages" in real or real.startswith(sys.base_prefix)):
            dirs.add(real)
    out = []
    for d in sorted(dirs):
        real = os.path.realpath(d)
        inside_project = real == root or real.startswith(root + os.sep)
        if inside_project and not real.startswith(os.path.realpath(sys.prefix)):
            continue  # never the grader's sources
        out.append(real)
    return out


def confined_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment an untrusted step starts with: the allow-listed variables, one hardware
    queue per CUDA context unless the host chose otherwise, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES)}
    env["CUDA_DEVICE_MAX_CONNECTIONS"] = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") or CONTEXT_QUEUES
    env.update(extra or {})
    return env


def gpu_device_nodes() -> list[str]:
    """The NVIDIA device nodes present on this machine (none on a machine without a GPU)."""
    return sorted(glob.glob(GPU_DEVICE_GLOB))


def _visible_system_dirs() -> list[str]:
    return [os.path.realpath(d) for d in SYSTEM_DIRS if not os.path.islink(d) and os.path.isdir(d)]


@functools.lru_cache(maxsize=None)
def _base_args(block_userns: bool = False) -> tuple[str, ...]:
    # No capability survives into the sandbox, even for root (no mount, no open_by_handle_at);
    # a session of its own, so it cannot push input into the grader's terminal.
    args = ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--unshare-net", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", *(NO_USERNS_ARGS if block_userns else ())]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for name in ETC_ALLOWED:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for node in gpu_device_nodes():
        args += ["--dev-bind", node, node]
    args += ["--tmpfs", "/dev/shm", "--ro-bind", "/sys", "/sys",
             "--size", str(TMP_SIZE_BYTES), "--tmpfs", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    return tuple(args)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _depth(path: str) -> int:
    return len(Path(path).parts)


def _mounts(read_only: tuple[str, ...], writable: tuple[str, ...], hidden: tuple[str, ...]) -> list[str]:
    """The mounts after the system's: Python, what the step is handed, and empty folders over
    everything private that would otherwise show through any of them.

    bubblewrap mounts in order, a later mount covering an earlier one, so they are sorted from
    the shallowest path to the deepest: a course under ``/usr/local/src`` is covered after
    ``/usr`` (or a toolkit folder ``/usr/local``) is bound, and a file handed to the step from
    inside a private folder (a build in the cache) is bound after that folder is covered.
    """
    visible = _visible_system_dirs()
    python = _python_dirs()
    private = _private_dirs(hidden)
    # (path, order among equals: cover first, then bind what was asked for, args)
    ops: list[tuple[str, int, list[str]]] = []
    for d in python:
        if not _under(d, visible) or _under(d, private):
            ops.append((d, 1, ["--ro-bind", d, d]))
    ops += [(p, 1, ["--ro-bind", p, p]) for p in read_only]
    ops += [(p, 1, ["--bind", p, p]) for p in writable]
    bound = visible + python + [os.path.realpath(p) for p in (*read_only, *writable)]
    for d in private:
        if d in _NEVER_HIDDEN or not _under(d, bound):
            continue
        if os.path.isdir(d) and not os.path.islink(d):
            ops.append((d, 0, ["--tmpfs", d]))
        elif os.path.lexists(d):
            ops.append((d, 0, ["--ro-bind", os.devnull, d]))
    ops.sort(key=lambda op: (_depth(op[0]), op[1]))
    return [arg for _, _, op_args in ops for arg in op_args]


def _probe(path: str, block_userns: bool) -> str:
    """Why the bubblewrap at ``path`` cannot run an empty sandbox ("" if it can); raises OSError or
    TimeoutExpired where it does not run at all."""
    probe = subprocess.run([path, *_base_args(block_userns), *_mounts((), (), _course_dirs()), "--", "true"],
                           capture_output=True, text=True, timeout=30)
    return "" if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["no message"])[-1]


def _userns_blocking(path: str) -> tuple[bool, str]:
    """Whether this bubblewrap can keep the sandbox from creating user namespaces, and why not."""
    try:
        why = _probe(path, True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap's --disable-userns did not run ({exc})"
    if not why:
        return True, ""
    return False, f"bubblewrap cannot deny them here: {why} (--disable-userns needs bubblewrap 0.8 and user namespaces)"


@functools.lru_cache(maxsize=None)
def detect() -> Sandbox:
    """The sandbox to use: bubblewrap if installed and working, unless ``GRADER_SANDBOX=off``."""
    mode = os.environ.get("GRADER_SANDBOX", "auto").lower()
    if mode in ("off", "0", "no", "none"):
        return Sandbox(None, reason="turned off (GRADER_SANDBOX=off)", turned_off=True)
    path = os.environ.get("GRADER_BWRAP") or shutil.which("bwrap")
    if not path:
        return Sandbox(None, reason=f"bubblewrap is not installed ({INSTALL_HINT})")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.split()[-1]
        why = _probe(path, False)
    except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
        return Sandbox(None, reason=f"bubblewrap at {path} did not run ({exc})")
    if why:
        return Sandbox(None, reason=f"bubblewrap at {path} cannot create a sandbox here ({why})")
    blocked, note = _userns_blocking(path)
    return Sandbox(path, version=version, userns_blocked=blocked, userns_note=note)


def refusal(sandbox: Sandbox) -> str:
    """Why a class run will not grade with ``sandbox`` (one that cannot start), and what would let it."""
    return (f"grade-class runs student code only inside the sandbox, and it cannot start here: {sandbox.reason}; "
            f"{HOST_NEEDS}; or pass --no-sandbox to grade without it (student code then runs as the grader's user, "
            "and every output of the class says so)")


def remove_read_only(folder: Path) -> None:
    """Remove a tree whose folders were made read-only: a user who is not root cannot unlink
    what is in them until they are writable again."""
    for path in [folder, *folder.rglob("*")] if folder.is_dir() else ():
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.chmod(0o700)
    shutil.rmtree(folder, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def worker_runtime() -> Path:
    """A read-only copy of the worker package, made once per grader process.

    Inside the sandbox the worker imports only this copy (the package needs nothing else of the
    grader), so the grader's other files stay hidden. It is byte-compiled here, once: a worker
    cannot write into it, and every worker (a dozen or more a repository) would otherwise compile
    the package's source again as it starts.
    """
    folder = Path(tempfile.mkdtemp(prefix="grader-runtime-"))
    atexit.register(remove_read_only, folder)
    here = Path(__file__).parent.parent  # the grader package
    package = folder / "grader"
    shutil.copytree(here / "worker", package / "worker", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(here / "__init__.py", package / "__init__.py")
    compileall.compile_dir(package, quiet=2)  # (one that does not compile is compiled by the worker, as before)
    for path in sorted(package.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    package.chmod(0o555)
    return folder
