"""How long ``cuda-grader collect`` takes for a class of local repositories.

    python benchmarks/collect_speed.py [--students 40] [--commits 5]

Builds one bare repository per student (each with a few commits of a lab file), then times the
first collection (every repository fetched whole), a second (nothing changed) and a third after
every student pushed one more commit.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.classroom.collect import collect, load_entries  # noqa: E402
from grader.gradebook.late import LatePolicy  # noqa: E402

DEADLINE = datetime.datetime(2026, 12, 1, 23, 59, tzinfo=datetime.timezone.utc)
ENV = {**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x", "GIT_COMMITTER_NAME": "s",
       "GIT_COMMITTER_EMAIL": "s@x", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True)


def commit_and_push(work: Path, k: int) -> None:
    target = work / "labs" / "tiled_matmul" / "student.cu"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"// version {k}\n" + "extern \"C\" void matmul(const float*, const float*, float*, int) {}\n" * 20)
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", f"version {k}")
    git(work, "push", "--quiet", "origin", "HEAD:main")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--students", type=int, default=40)
    p.add_argument("--commits", type=int, default=5)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="collect-bench-"))
    lines = []
    t0 = time.monotonic()
    for i in range(args.students):
        bare, work = base / "remotes" / f"s{i:03d}.git", base / "work" / f"s{i:03d}"
        bare.parent.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True)
        git(base, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
        git(work, "init", "--quiet", "--initial-branch=main")
        git(work, "remote", "add", "origin", str(bare))
        for k in range(args.commits):
            commit_and_push(work, k)
        lines.append(f"s{i:03d},remotes/s{i:03d}.git")
    (base / "class.csv").write_text("\n".join(lines) + "\n")
    print(f"{args.students} repositories of {args.commits} commits made in {time.monotonic() - t0:.1f} s; "
          f"{os.cpu_count()} CPUs")
    entries = load_entries(base / "class.csv", DEADLINE)
    runs = [("first collection", DEADLINE), ("nothing changed", DEADLINE + datetime.timedelta(hours=1))]
    for what, now in runs:
        t = time.monotonic()
        rows = collect(entries, base / "collected", LatePolicy(late_days=2), now=now, allow_local=True)
        print(f"{what}: {time.monotonic() - t:.2f} s for {len(rows)} students "
              f"({sum(1 for r in rows if r.commit)} collected)")
    for i in range(args.students):
        commit_and_push(base / "work" / f"s{i:03d}", args.commits)
    t = time.monotonic()
    rows = collect(entries, base / "collected", LatePolicy(late_days=2), now=DEADLINE + datetime.timedelta(hours=20),
                   allow_local=True)
    late = sum(1 for r in rows if r.late_days == "1")
    print(f"every student pushed again: {time.monotonic() - t:.2f} s ({late} now one day late)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
