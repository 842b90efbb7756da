"""Fetching a repository the grader does not trust into a clone of its own (``cuda-grader collect``).

The fetch uses the TA's own git configuration and environment, for their credentials (a
credential helper, an SSH key, ``url.<base>.insteadOf``), and nothing of the student's repository
can run a command here:

- Transports: https, http, ssh and git (``protocol.allow=never`` for every other). A remote helper
  (``ext::``, ``fd::``, any ``<name>::``) runs a program of its own: always refused. A folder of this
  machine or a ``file://`` URL is refused unless the TA allows it (``allow_local``): it would take
  the course's own checkout or a classmate's folder as a submission, and it is the one transport
  that runs git (``upload-pack``) on the source. There the upload-pack command is the grader's
  (never one a configuration names), with lazy fetching off, hooks and fsmonitor off: a source that
  is a partial clone whose promisor's ``uploadpack`` is a shell command cannot make it run. git
  itself refuses a local source that another user owns.
- No hook (``core.hooksPath=/dev/null``), fsmonitor, prompt (terminal, askpass), replace refs,
  submodules, tags, garbage collection; only the head of the default branch is fetched, into
  ``FETCH_HEAD`` (nothing is checked out). The clone's own location is given (``--git-dir``), never
  found by walking up from a folder.
- Bounded: blobs over ``FILTER_BYTES`` stay on the server (``--filter=blob:limit``: a graded file
  may hold at most ``SOURCE_LIMIT_BYTES``); the clone is watched as it grows and the fetch stopped,
  what it wrote removed, past ``STORE_LIMIT_BYTES``; a time limit; git's messages read through a cap.
- The clone is a partial clone only while it fetches: the source and its promisor settings are
  given in the fetch's environment (``GIT_CONFIG_COUNT``), never written into the clone's
  configuration. At rest the clone is a plain repository with some blobs missing, so no later git
  command in it can fetch (each also runs with ``GIT_NO_LAZY_FETCH=1`` and ``protocol.allow=never``):
  a missing blob has no size in ``git ls-tree -l`` and cannot be read.

A fetch that fails keeps git's own words (credentials taken out, controls stripped, capped), past
the advice git prints after every failure.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..textutil import CappedOutput, clean_line
from .procgroup import run_capped

#: Blobs larger than this are left on the server: the graded files are far smaller (1 MiB at most).
FILTER_BYTES = 4 << 20
#: The most one student's clone may hold (every collection's objects together).
STORE_LIMIT_BYTES = 100 << 20
FETCH_TIMEOUT_S = 300.0
GIT_TIMEOUT_S = 60.0
#: The transports fetched from (``git+ssh://`` and ``ssh+git://`` are ssh).
NETWORK = ("https", "http", "ssh", "git")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HELPER = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)::")
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:")  # git@github.com:course/alice.git
_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
#: The source's name, in the fetch's environment only.
REMOTE = "collect"
#: A caller's variables that would point git at another repository than the clone.
_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
             "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_SHALLOW_FILE", "GIT_GRAFT_FILE", "GIT_REPLACE_REF_BASE",
             "GIT_QUARANTINE_PATH", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_PREFIX")
#: Settings of every git command run here.
_SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "protocol.allow=never", "-c", "gc.auto=0",
         "-c", "maintenance.auto=false", "-c", "submodule.recurse=false", "-c", "fetch.recurseSubmodules=false")
#: What runs on a local source: git's upload-pack with lazy fetching, hooks and fsmonitor off
#: (the source's configuration is the student's), and the size filter allowed.
UPLOAD_PACK = ("GIT_NO_LAZY_FETCH=1 git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c protocol.allow=never "
               "-c uploadpack.allowFilter=true upload-pack")
#: What git prints after any failed fetch, whatever the cause.
_ADVICE = ("please make sure you have the correct access rights", "and the repository exists.")
#: The user and password (a token) of a clone URL, never repeated in a message or a file.
_USERINFO = re.compile(r"(\w[\w+.-]*://)[^/@\s]+@")


@dataclass(frozen=True)
class Fetched:
    """What one fetch found: the commit at the head of the default branch, or why there is none."""

    commit: str = ""
    committed: str = ""  # the commit's own committer time as git prints it (seconds since 1970)
    problem: str = ""
    left_out: tuple[str, ...] = ()  # files under labs/ of the commit left on the server (over FILTER_BYTES)


def redact(text: str) -> str:
    """``text`` without the credentials of any URL in it."""
    return _USERINFO.sub(r"\1***@", text)


def is_path(source: str) -> bool:
    """Whether git would take ``source`` as a path of this machine (no URL, no ``user@host:``)."""
    return not _SCHEME.match(source) and not _HELPER.match(source) and not _SCP.match(source)


def is_local(source: str) -> bool:
    """Whether git would read ``source`` from this machine: a path or a ``file://`` URL."""
    scheme = _SCHEME.match(source)
    return scheme.group(1).lower() == "file" if scheme else is_path(source)


def refusal(source: str, allow_local: bool) -> str:
    """Why ``source`` is not fetched from ("" if it may be)."""
    helper, scheme = _HELPER.match(source), _SCHEME.match(source)
    if not source.strip() or source.startswith("-"):
        return f"{redact(source)[:100]!r} is not a repository URL or path"
    if helper:
        return f"the transport {helper.group(1)}:: runs a program of its own: collect fetches over https, ssh or git"
    if scheme and scheme.group(1).lower() not in (*NETWORK, "git+ssh", "ssh+git", "file"):
        return f"unknown transport {scheme.group(1)}://: collect fetches over https, ssh or git"
    if is_path(source) and not os.path.isabs(source):  # git could read it as host:path (ssh)
        return f"{redact(source)[:100]!r} is a relative path: give the folder's whole path"
    if is_local(source) and not allow_local:
        return ("a folder of this machine, not a hosted repository: refused (it could be the course's own checkout "
                "or a classmate's folder); pass --allow-local to collect from folders of this machine")
    return ""


def _env(config: dict[str, str] | None = None) -> dict[str, str]:
    """The TA's environment (their git configuration stays: credentials, SSH) with no prompt, lazy
    fetching off, no repository location of a caller's, and ``config`` added for this command only."""
    env = {k: v for k, v in os.environ.items() if k not in _LOCATION}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false", SSH_ASKPASS="/bin/false", GIT_NO_REPLACE_OBJECTS="1",
               GIT_NO_LAZY_FETCH="1", LC_ALL="C")
    if config:
        count = env.get("GIT_CONFIG_COUNT", "")
        base = int(count) if count.isdigit() else 0
        for i, (key, value) in enumerate(config.items(), start=base):
            env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
        env["GIT_CONFIG_COUNT"] = str(base + len(config))
    return env


def git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git on the clone ``git_dir``, fetching nothing, with a time limit."""
    cmd = ["git", f"--git-dir={git_dir}", *_SAFE, *args]
    try:
        return subprocess.run(cmd, cwd=git_dir, env=_env(), capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"no answer within {GIT_TIMEOUT_S:.0f} s")
    except OSError as exc:
        return subprocess.CompletedProcess(cmd, 127, "", f"git cannot run: {exc}")


def cause(stderr: str, limit: int = 300) -> str:
    """git's own words for a failure: its lines without credentials, controls or advice, capped."""
    lines: list[str] = []
    for raw in redact(stderr).splitlines():
        line = clean_line(raw).strip()
        if line and line.lower() not in _ADVICE and not line.lower().startswith("hint:") and line not in lines:
            lines.append(line)
    text = "; ".join(lines) or "no message"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def why(stderr: str) -> str:
    """What a failed fetch means, with git's own words."""
    text, said = stderr.lower(), cause(stderr)
    if "couldn't find remote ref head" in text or "remote ref head" in text:
        return "the repository is empty (no commit on its default branch)"
    if any(s in text for s in ("not found", "does not appear to be a git repository", "does not exist", "no such file")):
        return f"repository not found (gone, renamed, or private to this account): {said}"
    if any(s in text for s in ("authentication", "permission denied", "could not read username", "access denied")):
        return f"access denied (private: give this account read access): {said}"
    return f"git fetch failed: {said}"


def stored(folder: Path) -> int:
    """Bytes in the files below ``folder`` (links not followed; a file gone meanwhile counts 0)."""
    total = 0
    for top, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                pass
    return total


class _Growth:
    """Set once ``folder`` holds more than ``limit`` bytes (looked at every tenth of a second at most)."""

    def __init__(self, folder: Path, limit: int) -> None:
        self.folder, self.limit = folder, limit
        self.over, self.next = False, 0.0

    def is_set(self) -> bool:
        if not self.over and time.monotonic() >= self.next:
            self.over = stored(self.folder) > self.limit
            self.next = time.monotonic() + 0.1
        return self.over


def _packs(git_dir: Path) -> set[str]:
    try:
        return set(os.listdir(git_dir / "objects" / "pack"))
    except OSError:
        return set()


def _drop_new(git_dir: Path, before: set[str]) -> None:
    """Remove what a stopped fetch wrote into the pack folder (its packs, its temporary files)."""
    for name in _packs(git_dir) - before:
        try:
            os.unlink(git_dir / "objects" / "pack" / name)
        except OSError:
            pass


def _init(clone: Path) -> str:
    """Make ``clone`` a repository (with no template: no sample hooks); "" or why not."""
    clone.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["git", *_SAFE, "init", "--quiet", "--template=", str(clone)], env=_env(), capture_output=True,
                              text=True, errors="replace", stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot make {clone}: {exc}"
    return "" if done.returncode == 0 else f"cannot make {clone}: {cause(done.stderr)}"


def _fetch_command(git_dir: Path, source: str, local: bool) -> tuple[list[str], dict[str, str]]:
    config = {f"remote.{REMOTE}.url": source, f"remote.{REMOTE}.promisor": "true",
              f"remote.{REMOTE}.partialclonefilter": f"blob:limit={FILTER_BYTES}"}
    if local:
        config[f"remote.{REMOTE}.uploadpack"] = UPLOAD_PACK
    allowed = [f"protocol.{name}.allow=always" for name in NETWORK] + [f"protocol.file.allow={'always' if local else 'never'}"]
    cmd = ["git", f"--git-dir={git_dir}", *_SAFE, *(a for pair in allowed for a in ("-c", pair)), "-c", "fetch.unpackLimit=1",
           "fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--force", f"--filter=blob:limit={FILTER_BYTES}",
           "--end-of-options", REMOTE, "HEAD"]
    return cmd, config


def fetch(source: str, clone: Path, allow_local: bool = False) -> Fetched:
    """The head of ``source``'s default branch, fetched into ``clone`` (made on the first fetch;
    every collected commit stays referenced, ``refs/collected/<hash>``, so a force push cannot make
    it vanish)."""
    refused = refusal(source, allow_local)
    if refused:
        return Fetched(problem=refused)
    git_dir = clone / ".git"
    if not git_dir.is_dir():
        problem = _init(clone)
        if problem:
            return Fetched(problem=problem)
    (git_dir / "FETCH_HEAD").unlink(missing_ok=True)
    before = _packs(git_dir)
    cmd, config = _fetch_command(git_dir, source, is_local(source))
    growth, said = _Growth(git_dir, STORE_LIMIT_BYTES), CappedOutput(4096, 4096)
    try:
        code = run_capped(cmd, said, FETCH_TIMEOUT_S, cwd=clone, env=_env(config), stop=growth)
    except OSError as exc:
        return Fetched(problem=f"git cannot run: {exc}")
    if growth.over or stored(git_dir) > STORE_LIMIT_BYTES:
        _drop_new(git_dir, before)
        return Fetched(problem=f"stopped: the repository holds more than {STORE_LIMIT_BYTES >> 20} MiB, the most kept of a "
                               "student's (a lab's files are far smaller)")
    if code is None:
        _drop_new(git_dir, before)
        return Fetched(problem=f"no answer within {FETCH_TIMEOUT_S:.0f} s")
    if code != 0:
        return Fetched(problem=why(said.text()))
    head = git(git_dir, "rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}").stdout.strip()
    if not _HASH.fullmatch(head):
        return Fetched(problem="the repository's default branch names no commit")
    git(git_dir, "update-ref", f"refs/collected/{head}", head)
    return Fetched(head, git(git_dir, "show", "-s", "--format=%ct", head).stdout.strip(), "", _left_out(git_dir, head))


def _left_out(git_dir: Path, commit: str) -> tuple[str, ...]:
    """The files under ``labs/`` of ``commit`` that are not in the clone (git gives no size for them)."""
    done = git(git_dir, "ls-tree", "-r", "-z", "-l", "--full-tree", commit, "--", "labs")
    out = []
    for record in done.stdout.split("\0"):
        meta, _, path = record.partition("\t")
        parts = meta.split()
        if len(parts) == 4 and parts[1] == "blob" and not parts[3].isdigit():
            out.append(clean_line(path))
    return tuple(out[:20])


def rewritten(clone: Path, old: str, new: str) -> bool:
    """Whether ``old`` is no longer in the history of ``new`` (exit 1 of --is-ancestor: not an ancestor)."""
    return git(clone / ".git", "merge-base", "--is-ancestor", old, new).returncode == 1
