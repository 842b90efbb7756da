"""Attacks a student's code would try from inside the sandbox, run through the grader's own code.

Run as a script, as root or as an unprivileged user, so both can be tested for real:

    python sandbox_probes.py GRADER_PARENT PROBE

It imports the grader from GRADER_PARENT, runs PROBE's attack inside the sandbox exactly as a
worker would be confined (``Isolation.command``), and prints one JSON object with what it saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# What runs inside the sandbox: plain Python, as the student's code would run there.
ESCAPE = r"""
import ctypes, json, os, struct
libc = ctypes.CDLL(None, use_errno=True)
out = {}
status = open("/proc/self/status").read()
out["cap_eff"] = status.split("CapEff:")[1].split()[0]
out["cap_prm"] = status.split("CapPrm:")[1].split()[0]
os.makedirs("/tmp/m", exist_ok=True)
rc = libc.mount(b"none", b"/tmp/m", b"tmpfs", 0, None)
out["mount"] = "ALLOWED" if rc == 0 else os.strerror(ctypes.get_errno())
# open_by_handle_at: with CAP_DAC_READ_SEARCH a handle opens any file of the filesystem
buf = ctypes.create_string_buffer(8 + 128)
struct.pack_into("I", buf, 0, 128)
mount_id = ctypes.c_int()
target = os.environ.get("PROBE_HANDLE_TARGET", "/usr/bin/env").encode()
if libc.name_to_handle_at(-100, target, buf, ctypes.byref(mount_id), 0) != 0:
    out["open_by_handle_at"] = "no handle: " + os.strerror(ctypes.get_errno())
else:
    mfd = os.open("/usr", os.O_RDONLY)
    fd = libc.open_by_handle_at(mfd, buf, os.O_RDONLY)
    out["open_by_handle_at"] = "ALLOWED" if fd >= 0 else os.strerror(ctypes.get_errno())
out["dev"] = sorted(os.listdir("/dev"))
out["etc"] = sorted(os.listdir("/etc"))
for name in ("/etc/shadow", "/etc/hostname", "/root", "/opt"):
    try:
        out[name] = "READABLE: " + (open(name).read(40) if os.path.isfile(name) else ",".join(os.listdir(name)))
    except OSError as exc:
        out[name] = exc.strerror
out["environ"] = dict(os.environ)
out["pid1_environ"] = open("/proc/1/environ", "rb").read().decode(errors="replace")
print(json.dumps(out))
"""

PLANT = r"""
import json, os, sys
inbox, outbox = sys.argv[1], sys.argv[2]
out = {}
def attempt(what, fn):
    try:
        fn()
        out[what] = "ALLOWED"
    except OSError as exc:
        out[what] = exc.strerror
# replace the next case's input with a link to a file outside scratch
attempt("replace input", lambda: (os.unlink(os.path.join(inbox, "case1", "M.npy")),
                                  os.symlink("/etc/passwd", os.path.join(inbox, "case1", "M.npy"))))
attempt("write job", lambda: open(os.path.join(inbox, "job.json"), "w").write("{}"))
# an output and a result the grader will read back, as links to a secret
os.makedirs(os.path.join(outbox, "case0"), exist_ok=True)
attempt("plant output link", lambda: os.symlink(os.environ["PROBE_SECRET_FILE"], os.path.join(outbox, "case0", "P.npy")))
attempt("plant result link", lambda: os.symlink(os.environ["PROBE_SECRET_FILE"], os.path.join(outbox, "result.json")))
print(json.dumps(out))
"""


def _isolation():
    from grader.isolation import sandbox
    from grader.isolation.launch import Isolation

    return Isolation(sandbox.detect())


def probe_escape(work: Path) -> dict:
    from grader.isolation.launch import RunDirs

    dirs = RunDirs(work / "in", work / "out").make()
    cmd, env = _isolation().command([sys.executable, "-I", "-c", ESCAPE], dirs)
    env["PROBE_HANDLE_TARGET"] = "/usr/bin/env"
    done = subprocess.run(cmd, env=env, cwd=dirs.outbox, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout)


def probe_plant(work: Path) -> dict:
    """Plant links where the grader writes and reads, then let the grader read and write as it does."""
    from grader.errors import GraderError
    from grader.host.safeio import read_beneath, write_private
    from grader.isolation.launch import RunDirs

    dirs = RunDirs(work / "in", work / "out").make()
    (dirs.inbox / "case1").mkdir()
    (dirs.inbox / "case1" / "M.npy").write_bytes(b"an input the grader wrote")
    secret = work / "secret.txt"
    secret.write_text("reference solution text")
    cmd, env = _isolation().command([sys.executable, "-I", "-c", PLANT, str(dirs.inbox), str(dirs.outbox)], dirs)
    env["PROBE_SECRET_FILE"] = str(secret)
    done = subprocess.run(cmd, env=env, cwd=dirs.outbox, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    seen = json.loads(done.stdout)
    seen["input intact"] = not (dirs.inbox / "case1" / "M.npy").is_symlink()
    for what, read in (("read output", lambda: read_beneath(dirs.outbox, "case0/P.npy", 1 << 20)),
                       ("read result", lambda: read_beneath(dirs.outbox, "result.json", 1 << 20))):
        try:
            seen[what] = f"READ: {read()!r}"
        except GraderError as exc:
            seen[what] = f"refused: {exc}"
    link = dirs.outbox / "planted-job.json"
    link.symlink_to(secret)
    try:
        write_private(link, b"{}")
        seen["write through link"] = "WROTE"
    except OSError as exc:
        seen["write through link"] = f"refused: {exc.strerror}"
    seen["secret intact"] = secret.read_text() == "reference solution text"
    return seen


def probe_trusted_import(work: Path) -> dict:
    """A ``grader`` package and a ``sitecustomize`` planted in a trusted run's working folder and on
    PYTHONPATH: the trusted worker must import neither."""
    from grader.isolation.launch import Isolation, RunDirs, worker_command
    from grader.isolation.sandbox import Sandbox

    dirs = RunDirs(work / "in", work / "out").make()
    marker = work / "planted-code-ran"
    for folder in (dirs.outbox / "grader", dirs.outbox):
        folder.mkdir(exist_ok=True)
    plant = f"open({str(marker)!r}, 'a').write('ran\\n')\n"
    (dirs.outbox / "grader" / "__init__.py").write_text(plant)
    (dirs.outbox / "grader" / "worker.py").write_text(plant + "def main(argv):\n    return 0\n")
    (dirs.outbox / "sitecustomize.py").write_text(plant)
    trusted = Isolation(Sandbox(None), trusted=True)
    os.environ["PYTHONPATH"] = str(dirs.outbox)  # as a hostile environment would have it
    cmd, env = trusted.command(worker_command("--no-such-mode"), dirs)
    done = subprocess.run(cmd, env={**env, "PYTHONPATH": str(dirs.outbox)}, cwd=dirs.outbox, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    seen = {"ours": "usage: grader.worker.main" in done.stderr, "returncode": done.returncode,
            "planted ran": marker.exists()}
    # the control: how a trusted run used to start
    old = subprocess.run([sys.executable, "-m", "grader.worker", "--no-such-mode"], env={**env, "PYTHONPATH": str(dirs.outbox)},
                         cwd=dirs.outbox, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    seen["planted ran the old way"] = marker.exists()
    seen["old returncode"] = old.returncode
    return seen


def probe_runtime(work: Path) -> dict:
    """The read-only copy of the worker a grader process makes (removed when it exits)."""
    from grader.isolation.sandbox import worker_runtime

    folder = worker_runtime()
    return {"runtime": str(folder), "read only": not os.access(folder / "grader", os.W_OK) or os.geteuid() == 0}


PROBES = {"escape": probe_escape, "plant": probe_plant, "trusted_import": probe_trusted_import, "runtime": probe_runtime}


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    work = Path(tempfile.mkdtemp(prefix="probe-"))
    try:
        print(json.dumps(PROBES[sys.argv[2]](work)))
    finally:
        from grader.isolation.sandbox import remove_read_only  # what a probe made read-only goes too

        remove_read_only(work)


if __name__ == "__main__":
    main()
