"""How the worker confines itself before student code runs, and its start-up hygiene."""

from __future__ import annotations

import ctypes
import os
import resource
import sys


def confine() -> None:
    """What every worker does once CUDA is up and before student code is loaded."""
    forbid_new_processes()
    enter_landlock_domain()


# Landlock (Linux 5.13+): a process in a domain cannot ptrace, read the memory of, or open the
# files of any process outside it (ptrace access checks guard /proc/PID/mem and /proc/PID/fd).
_LANDLOCK_CREATE_RULESET, _LANDLOCK_RESTRICT_SELF = 444, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_MAKE_CHAR, _MAKE_BLOCK = 1 << 6, 1 << 11  # the rights the ruleset handles (and grants nowhere)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(0, int(version))


def enter_landlock_domain() -> bool:
    """Put this process in a Landlock domain of its own; False where the kernel has no Landlock."""
    if landlock_abi() < 1:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    handled = ctypes.c_uint64(_MAKE_CHAR | _MAKE_BLOCK)  # struct landlock_ruleset_attr, first field only
    fd = libc.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if fd < 0:
        return False
    try:
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return False
        return bool(libc.syscall(_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) == 0)
    finally:
        os.close(fd)


def close_tool_log() -> None:
    """Close the profiler's log pipe inherited from it (``GRADER_CLOSE_FD=fd:inode``): only the
    profiler may write the report the grader reads."""
    spec = os.environ.pop("GRADER_CLOSE_FD", "")
    fd_text, _, inode = spec.partition(":")
    if not fd_text.isdigit():
        return
    try:
        if str(os.fstat(int(fd_text)).st_ino) == inode:
            os.close(int(fd_text))
    except OSError:
        pass


def private_kernel_cache() -> None:
    """Start from a copy of the grader's CuPy kernel cache (``GRADER_CUPY_SEED``), never the cache itself."""
    seed = os.environ.pop("GRADER_CUPY_SEED", "")
    if not seed:
        return
    import shutil
    import tempfile

    own = tempfile.mkdtemp(prefix="cupy-kernels-")
    if os.path.isdir(seed):
        shutil.copytree(seed, own, dirs_exist_ok=True, symlinks=True)
    os.environ["CUPY_CACHE_DIR"] = own


def limit_self() -> None:
    """Cap the size of every file this process writes (runaway prints) and disable core dumps."""
    limit = int(os.environ.get("GRADER_FILE_LIMIT_BYTES", "0") or 0)
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# seccomp: after CUDA is up, the process may start threads but no new processes (a fork bomb,
# system(), popen() all fail with EAGAIN). RLIMIT_NPROC cannot do this: root is exempt from it.
_AUDIT_ARCH = {"x86_64": (0xC000003E, {"clone": 56, "fork": 57, "vfork": 58, "clone3": 435}),
               "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435})}
_CLONE_THREAD = 0x00010000


def seccomp_program(arch: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: threads yes, new processes no."""
    audit, nr = _AUDIT_ARCH[arch]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    errno = 0x00050000
    # (code, jump if true, jump if false, k) with jumps as labels; None falls through
    code = [
        (ld, None, None, 4),  # seccomp_data.arch
        (jeq, None, "eperm", audit),  # another ABI (int 0x80 on x86_64): refused
        (ld, None, None, 0),  # seccomp_data.nr
        (jge, "eperm", None, 0x40000000),  # x32 system calls: refused
        (jeq, "enosys", None, nr["clone3"]),  # flags hide behind a pointer; glibc falls back to clone
        *[(jeq, "eagain", None, nr[n]) for n in ("fork", "vfork") if n in nr],
        (jeq, None, "allow", nr["clone"]),
        (ld, None, None, 16),  # low word of args[0]: the clone flags
        (jset, "allow", "eagain", _CLONE_THREAD),
    ]
    labels = {"allow": 0x7FFF0000, "eagain": errno | 11, "enosys": errno | 38, "eperm": errno | 1}
    where = {name: len(code) + i for i, name in enumerate(labels)}
    out = []
    for pc, (op, jt, jf, k) in enumerate(code):
        out.append((op, where[jt] - pc - 1 if jt else 0, where[jf] - pc - 1 if jf else 0, k))
    out += [(ret, 0, 0, value) for value in labels.values()]
    return out


def forbid_new_processes() -> bool:
    """Install the filter on every thread of this process; False where that is not possible."""
    import platform

    arch = platform.machine()
    if arch not in _AUDIT_ARCH or not sys.platform.startswith("linux"):
        return False

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    insns = seccomp_program(arch)
    array = (SockFilter * len(insns))(*[SockFilter(*i) for i in insns])
    fprog = SockFprog(len(insns), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    sys_seccomp = {"x86_64": 317, "aarch64": 277}[arch]
    # SECCOMP_SET_MODE_FILTER with SECCOMP_FILTER_FLAG_TSYNC: CUDA's threads get it too
    return bool(libc.syscall(sys_seccomp, 1, 1, ctypes.byref(fprog)) == 0)
