"""Process groups: reading a child's output within bounds, killing the group and waiting until none
of its members still runs."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Protocol

import psutil

from ..context import carried
from ..textutil import CappedOutput
from . import gputurns

SETTLE_S = 2.0


class Stop(Protocol):
    """What stops a run early: a ``threading.Event`` or :class:`AnyOf`."""

    def is_set(self) -> bool: ...


class Killable(Protocol):
    def kill(self) -> None: ...


def kill_together(*those: Killable) -> None:
    """``kill()`` each at once (a worker's exit releases a CUDA context, which takes a while: a
    step of GPU work in this process's turns, :mod:`grader.host.gputurns`)."""
    with gputurns.step():
        threads = [threading.Thread(target=carried(one.kill), name="kill-together") for one in those[1:]]
        for thread in threads:
            thread.start()
        those[0].kill()
        for thread in threads:
            thread.join()


class Teardowns:
    """Workers being ended in the background, by GPU: a repository's timings open (nothing timed
    yet) while the previous repository's workers exit and release their CUDA contexts, and a
    timing waits for them before its first timed call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, list[threading.Thread]] = {}

    def start(self, gpu: str, *those: Killable) -> None:
        """End ``those`` together, in the background."""
        thread = threading.Thread(target=carried(kill_together), args=those, name="teardown")
        with self._lock:
            self._pending.setdefault(gpu, []).append(thread)
        thread.start()

    def wait(self, gpu: str) -> None:
        """Block until every worker being ended on ``gpu`` is gone."""
        with self._lock:
            threads = list(self._pending.get(gpu, ()))
        for thread in threads:
            thread.join()
        with self._lock:
            self._pending[gpu] = [t for t in self._pending.get(gpu, ()) if t.is_alive()]


#: The grader's workers being ended (one registry for the process: a GPU's timings take turns).
TEARDOWNS = Teardowns()


class AnyOf:
    """Set once any of ``events`` is."""

    def __init__(self, events: Iterable[Stop]) -> None:
        self.events = tuple(events)

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)

# The sandbox ends a process when the thread that started it ends (``bwrap --die-with-parent``
# is the parent-death signal, which Linux sends when the creating *thread* exits). Grading starts
# long-lived workers from short-lived threads (one per lab, one per timing), so they are all
# started from this one thread, which lives as long as the grader.
_STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="process-starter")


def start_lasting(cmd: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **popen)`` that outlives the calling thread (see ``_STARTER``)."""
    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, **popen)

    return _STARTER.submit(carried(start)).result()


#: What reading a process in /proc can raise as it exits: psutil's errors, and IndexError or
#: ValueError from parsing a short /proc/PID/stat (psutil 7.2.2 raised IndexError so in a class
#: graded on four GPUs). ``psutil.process_iter`` raises those out of the whole walk, and shares one
#: table of processes between threads besides.
GONE = (psutil.Error, OSError, IndexError, ValueError)


def _alive(proc: psutil.Process) -> bool:
    """Still running: a zombie has closed its files and released its memory (and GPU)."""
    try:
        return proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except GONE:
        return False


def _members(pgid: int) -> list[psutil.Process]:
    """The live processes of group ``pgid`` (a process that exits as it is read is not one)."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) != pgid:
                continue
            proc = psutil.Process(pid)
        except GONE:
            continue
        if _alive(proc):
            found.append(proc)
    return found


def _children() -> dict[int, list[int]]:
    """Each process's children, by id, read from /proc/PID/stat (one that cannot be read is left
    out: psutil's own table raises out of the whole walk for it). Read with plain system calls: a
    timing holds and releases the student's worker through this walk of every process on the
    host, and a ``Path`` for each took 2.5 times as long."""
    found: dict[int, list[int]] = {}
    for pid in psutil.pids():
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 4096)
            finally:
                os.close(fd)
            parent = int(stat[stat.rindex(b")") + 2:].split()[1])  # the name, in brackets, may hold anything
        except (OSError, ValueError, IndexError):
            continue
        found.setdefault(parent, []).append(pid)
    return found


def _below(proc: psutil.Process, children: dict[int, list[int]] | None = None) -> list[psutil.Process]:
    """Every process below ``proc``, found by walking down from its id in ``children`` (read now
    where not given; those that exit as they are read are left out)."""
    try:
        if not proc.is_running():  # exited and reaped: its number may be another's, whose children are not ours
            return []
    except GONE:
        pass  # its entry there but unreadable as it exits: the number is still its own
    children = _children() if children is None else children
    found, todo = [], list(children.get(proc.pid, ()))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, ())
        with contextlib.suppress(*GONE):
            found.append(psutil.Process(pid))
    return found


def live_members(pgid: int) -> list[int]:
    """Process ids in group ``pgid`` that have not yet exited (zombies are not counted)."""
    return [proc.pid for proc in _members(pgid)]


def _tree(pgid: int) -> list[psutil.Process]:
    """The live processes of group ``pgid`` and every live process below them."""
    tree = {proc.pid: proc for proc in _members(pgid)}
    children = _children()  # (one read of the table for every member)
    for proc in list(tree.values()):
        for child in _below(proc, children):
            if _alive(child):
                tree.setdefault(child.pid, child)
    return list(tree.values())


def hold_group(pgid: int, stopped: bool) -> None:
    """Stop (SIGSTOP) or continue (SIGCONT) group ``pgid`` and everything below it: while
    stopped, none of its code runs (a thread the program left running included)."""
    for proc in _tree(pgid):
        with contextlib.suppress(*GONE):
            if stopped:
                proc.suspend()
            else:
                proc.resume()


def kill_group(pgid: int, settle_s: float = SETTLE_S) -> bool:
    """SIGKILL every process in group ``pgid`` and every process below them, then wait up to
    ``settle_s`` for them all to be gone.

    Processes below can sit in groups of their own (the sandbox starts its command in a new
    session), and a killed process only stops once the kernel delivers the signal and its exit
    releases what it held (its GPU context): a caller that goes on at once, to time a kernel say,
    could still share the GPU with it. Returns False when one outlived ``settle_s``."""
    doomed = _tree(pgid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return kill_all(doomed, settle_s)


def ended(proc: psutil.Process) -> bool:
    """Whether ``proc`` has exited (a zombie not yet reaped counts: it runs nothing any more)."""
    return not _alive(proc)


def kill_tree(root: psutil.Process, settle_s: float = SETTLE_S) -> bool:
    """SIGKILL ``root`` and every process below it (those in sessions of their own and those
    stopped included), then wait up to ``settle_s`` for them all to be gone. Returns False when
    one outlived ``settle_s``."""
    doomed = [root, *_below(root)]  # listed before any dies: orphans leave the tree
    return kill_all(doomed, settle_s)


def below(root: psutil.Process) -> list[psutil.Process]:
    """Every process below ``root`` now."""
    return _below(root)


def kill_all(doomed: list[psutil.Process], settle_s: float = SETTLE_S) -> bool:
    """SIGKILL each of ``doomed``, then wait up to ``settle_s`` for them all to be gone."""
    for proc in doomed:
        try:
            proc.kill()
        except psutil.Error:
            pass  # gone already
        except GONE:  # its /proc entry unreadable as it exits (psutil checks it first): by its number then
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + settle_s
    while any(_alive(proc) for proc in doomed):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def drain(fd: int, sink: CappedOutput) -> bool:
    """Read what is there; False at end of file."""
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not chunk:
        return False
    sink.feed(chunk)
    return True


def pump(streams: dict[int, CappedOutput], proc: subprocess.Popen[bytes], deadline: float,
         stop: Stop | None = None) -> int | None:
    """Read every stream until all are closed and the process has ended; None past the deadline
    or once ``stop`` is set."""
    open_fds = set(streams)
    for fd in open_fds:
        os.set_blocking(fd, False)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or (stop is not None and stop.is_set()):
            kill_group(proc.pid)
            proc.wait()
            return None
        if open_fds:
            ready, _, _ = select.select(list(open_fds), [], [], min(left, 0.5))
            for fd in ready:
                if not drain(fd, streams[fd]):
                    open_fds.discard(fd)
            if ready or proc.poll() is None:
                continue
        try:
            code = proc.wait(min(max(left, 0.0), 0.5))
        except subprocess.TimeoutExpired:
            continue
        for fd in list(open_fds):  # a child may still hold a pipe: take what is there, then stop
            while select.select([fd], [], [], 0)[0] and drain(fd, streams[fd]):
                pass
        return code


def run_capped(cmd: list[str], console: CappedOutput, time_limit_s: float, *, cwd: Path, env: dict[str, str],
               pass_fds: tuple[int, ...] = (), pipes: dict[int, CappedOutput] | None = None,
               stop: Stop | None = None) -> int | None:
    """Run ``cmd`` in a process group of its own with /dev/null as stdin, read its stdout and
    stderr into ``console`` and each read end in ``pipes`` into its sink, and kill the group when
    it ends, at the limit or once ``stop`` is set. Returns its exit status, None if it was killed.

    ``pass_fds`` (the write ends of ``pipes``) are closed here once the process has them; the
    read ends stay the caller's to close."""
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=pass_fds)
    finally:
        for fd in pass_fds:
            os.close(fd)
    assert proc.stdout is not None
    try:
        return pump({proc.stdout.fileno(): console, **(pipes or {})}, proc, time.monotonic() + time_limit_s, stop)
    finally:
        kill_group(proc.pid)  # anything left behind in the group
        proc.stdout.close()
