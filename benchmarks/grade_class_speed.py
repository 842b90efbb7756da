"""Wall time of grading a class, each GPU's busy fraction, and verdicts against grading each repository alone.

    python benchmarks/grade_class_speed.py [--students 40] [--gpus all|0|0,1] [--no-gpu] [--no-compare] [--warm]
                                           [--keep DIR [--resume]] [-j N] [--counters replay|ncu]
    python benchmarks/grade_class_speed.py --alone-only --keep DIR [--resume] [--students N] [--gpus all|0,1] [--shard I/N]
    python benchmarks/grade_class_speed.py --keep DIR --compare-with ALONE.json [--compare-with ALONE-2-of-2.json] ...

Builds a class in a temporary folder: repositories of the five references, of known-wrong
solutions (one lab wrong, the rest references), of the untouched stubs, with labs missing, with no
labs/ folder, with a compile error and with a submission that hangs. Grades it with
``grade-class`` (cold: an empty build cache, unless --warm), then each repository alone with
``grade-repo`` and compares every check's verdict (--no-compare skips that). On a GPU it samples
NVML utilisation of every GPU graded on every half second while the class is graded. A run stopped
part-way (``timeout`` sends SIGTERM) goes on with ``--keep DIR --resume``: the same class, results
and build cache, the students already graded skipped, and the wall times of the runs added up.

Grading alone can be done apart (on another GPU, while a class is graded): ``--alone-only`` grades
the same class (the class is the same for the same --students) one repository at a time and saves
every verdict to ``DIR/alone.json`` as it goes (``--resume`` keeps those already saved);
``--compare-with`` compares a class run with such a file instead of grading alone again. On a host
with several GPUs (``--gpus`` picks them, all by default) it grades a slice of the class on each at
once, a process per GPU that sees only that GPU, each slice into ``DIR/alone-I-of-N.json`` and
all of them into ``DIR/alone.json``; ``--shard I/N`` grades one slice (every N-th repository) of a
class already built in DIR. The files given to ``--compare-with`` are taken together, and students
none of them has are named.

Targets: 40 repositories on one H100 in <= 8 minutes (<= 12 s each, amortised) with every check
on; 20 repositories with --no-gpu in <= 60 s cold on 2 cores; with several GPUs, the wall time of
one GPU's run divided by the GPU count, within 10%.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.checks.counters.replay.service import PHASES as REPLAY_PHASES  # noqa: E402
from grader.classroom import roster, stopping  # noqa: E402
from grader.classroom import shard as shards  # noqa: E402
from grader.classroom.progress import LANES_LOG, Display, read_log  # noqa: E402
from grader.classroom.run import ClassOptions, gpu_slots, grade_class  # noqa: E402
from grader.course.validate import load_solutions  # noqa: E402
from grader.engine.grade import WORKER_START  # noqa: E402
from grader.engine.repo import HEALTH_GATE, grade_repo, submission_path  # noqa: E402
from grader.errors import GraderError  # noqa: E402
from grader.gradebook.records import STUDENTS_DIR  # noqa: E402
from grader.host.gpus import seeing_only  # noqa: E402
from grader.isolation.options import GradeOptions, usable_cpus  # noqa: E402
from grader.labspec.labs import find_lab, lab_ids  # noqa: E402
from grader.textutil import plural  # noqa: E402

HANG = ROOT / "tests" / "hostile" / "tiled_matmul" / "host_infinite_loop.cu"
COMPILE_ERROR = "// does not compile\nextern \"C\" void matmul(const float* M, const float* N, float* P, int width) { oops }\n"


def _recipes(count: int) -> list[tuple[str, dict[str, Path | str | None]]]:
    """(name, lab -> source: a file, text, or None for missing); the first ones are the special cases."""
    refs: dict[str, Path | str | None] = {lab: find_lab(lab).files.reference for lab in lab_ids()}
    out: list[tuple[str, dict[str, Path | str | None]]] = [
        ("ref-1", dict(refs)),
        ("stub", {lab: find_lab(lab).files.stub for lab in lab_ids()}),
        ("compile-error", {**refs, "tiled_matmul": COMPILE_ERROR}),
        ("hang", {**refs, "tiled_matmul": HANG}),
        ("nolabs", {}),
        ("missing-two", {**refs, "histogram": None, "corner_turning": None}),
    ]
    wrong = sorted((lab, p) for lab in lab_ids() for p in (ROOT / "labs" / lab / "solutions" / "wrong").glob("*.cu"))
    for k, (lab, path) in enumerate(wrong):
        out.append((f"wrong-{lab}-{path.stem}", {**refs, lab: path}))
        if k % 6 == 5:
            name = f"missing-{lab}" if all(n != f"missing-{lab}" for n, _ in out) else f"missing-{lab}-{k}"
            out.append((name, {**refs, lab: None}))
    k = 2
    while len(out) < max(60, count):
        out.append((f"ref-{k}", dict(refs)))
        k += 1
    return out


def build_class(folder: Path, count: int) -> list[str]:
    names = []
    for name, labs in _recipes(count)[:count]:
        repo = folder / name
        repo.mkdir(parents=True)
        for lab, source in labs.items():
            if source is None:
                continue
            target = submission_path(repo, lab)
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, Path):
                shutil.copy(source, target)
            else:
                target.write_text(source)
        names.append(name)
    return names


def program_of(proc: psutil.Process) -> str:
    """What a process of the run is, for its CPU time: the grader's workers (Python, with student
    code or the grader's own) apart from the grader's other Python, else the program's name."""
    name = proc.name()
    if name.startswith("python"):
        return "python: workers" if any("grader.worker.main" in arg for arg in proc.cmdline()) else "python: the grader"
    return name


class BusySampler:
    """NVML utilisation of the GPUs graded on, and the share of the host's CPU time in use, sampled
    every ``period`` seconds: where both stay low, a class's time goes to waiting (one step after
    another on a student's path), not to a busy GPU or busy cores. Also the CPU time of this
    process and every process below it, by program (``by_program``: as last sampled, so a process
    that ended between two samples is counted up to the one before)."""

    def __init__(self, indices: list[int], period: float = 0.5) -> None:
        self.indices, self.period = indices, period
        self.samples: dict[int, list[float]] = {i: [] for i in indices}
        self.memory: list[float] = []  # share of a GPU's memory in use
        self.cpu: list[float] = []  # percent of all the host's CPU time, since the sample before
        self._seen: dict[tuple[int, float], tuple[str, float]] = {}  # (pid, start time) -> (program, CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        handles = []
        if self.indices:
            import pynvml  # nvidia-ml-py: only where there is a GPU

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        psutil.cpu_percent()  # (the first call starts the count)
        while not self._stop.wait(self.period):
            self.cpu.append(psutil.cpu_percent())
            self._count_processes()
            for i, h in zip(self.indices, handles):
                self.samples[i].append(float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
                info = pynvml.nvmlDeviceGetMemoryInfo(h)
                self.memory.append(info.used / info.total if info.total else 0.0)
        if self.indices:
            pynvml.nvmlShutdown()

    def _count_processes(self) -> None:
        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    key = (proc.pid, proc.create_time())
                    program = self._seen[key][0] if key in self._seen else program_of(proc)
                    self._seen[key] = (program, times.user + times.system)
            except (psutil.Error, OSError):
                continue  # (ended, or not ours to read)

    def by_program(self) -> dict[str, tuple[float, int]]:
        """CPU seconds and process count by program, most first."""
        out: dict[str, tuple[float, int]] = {}
        for program, seconds in self._seen.values():
            total, count = out.get(program, (0.0, 0))
            out[program] = (total + seconds, count + 1)
        return dict(sorted(out.items(), key=lambda kv: -kv[1][0]))

    def __enter__(self) -> "BusySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


Verdict = tuple[str, str, str, str]  # lab, check, outcome, stage


def student_report(out: Path, name: str) -> Path:
    """A student's ``report.json`` in a class run's results folder ``out``."""
    return out / STUDENTS_DIR / name / "report.json"


def in_class_verdicts(out: Path, name: str) -> list[Verdict]:
    doc = json.loads(student_report(out, name).read_text())
    return [(r["lab"], c["id"], c["outcome"], c["stage"]) for r in doc["labs"] for c in r["checks"]]


def alone_verdicts(repo: Path, options: GradeOptions) -> list[Verdict] | str:
    """Every check's verdict with the repository graded alone, or why it is not a repository."""
    try:
        reports = grade_repo(repo, options)
    except GraderError as exc:
        return str(exc)
    return [(r.lab, c.id, c.outcome.value, c.stage.value) for r in reports for c in r.checks]


Difference = tuple[str, str, str, str]  # student, lab, check ("" for the whole repository), what differs


def differ(name: str, alone: list[Verdict] | str, in_class: list[Verdict], before: str = "alone") -> list[Difference]:
    """Where ``in_class`` differs from the verdicts ``alone`` (graded alone, or ``before``: in
    another run)."""
    if isinstance(alone, str):  # not a repository: the class must have said so for every lab
        return [] if all(c[2] != "pass" for c in in_class) else [(name, "", "", f"{before}: {alone}; in the class some checks passed")]
    out = [(name, a[0], a[1], f"{a[0]}/{a[1]} {before} {a[2]}, in the class {b[2]} ({a[3]})") for a, b in zip(alone, in_class) if a != b]
    if len(alone) != len(in_class):
        out.append((name, "", "", f"{len(alone)} checks {before}, {len(in_class)} in the class"))
    return out


def borderline(count: int) -> Callable[[Difference], bool]:
    """Whether a difference is in a check whose expected verdict is `any` for the known solution
    the student handed in (expected.yaml says why: a ratio at a threshold of its speed check, on an
    H100). As in benchmarks/regrade_stability.py, such a flip is listed, not counted."""
    handed_in = dict(_recipes(count))
    expected = {s.file.resolve(): s for lab in lab_ids() for s in load_solutions(find_lab(lab))}

    def allowed(diff: Difference) -> bool:
        source = handed_in.get(diff[0], {}).get(diff[1])
        known = expected.get(source.resolve()) if isinstance(source, Path) else None
        return known is not None and bool(diff[2]) and known.verdict(diff[2]) == "any"
    return allowed


def compare(repos: Path, out: Path, names: list[str], options: GradeOptions) -> list[Difference]:
    """Each student's verdicts in the class against grading their repository alone."""
    return [line for name in names for line in differ(name, alone_verdicts(repos / name, options), in_class_verdicts(out, name))]


def compare_with(saved: list[Path], out: Path, names: list[str]) -> list[Difference]:
    """Each student's verdicts in the class against those of another class run (``saved`` is its
    results folder: a regrade), or those ``--alone-only`` saved (JSON files: its slices' together)."""
    if len(saved) == 1 and saved[0].is_dir():
        earlier: dict[str, Any] = {n: in_class_verdicts(saved[0], n) for n in names if student_report(saved[0], n).is_file()}
        before = "in the earlier run"
    else:
        earlier, before = {}, "alone"
        for file in saved:
            earlier.update(json.loads(file.read_text()))
    missing = [n for n in names if n not in earlier]
    if missing:
        print(f"{', '.join(map(str, saved))}: no verdicts for {len(missing)} of {len(names)} students "
              f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); they are not compared")

    def verdicts(saved: Any) -> list[Verdict] | str:
        return saved if isinstance(saved, str) else [(a, b, c, d) for a, b, c, d in saved]
    return [line for name in names if name in earlier for line in differ(name, verdicts(earlier[name]), in_class_verdicts(out, name), before)]


def dram_figures(out: Path, names: list[str]) -> dict[tuple[str, str, str], float]:
    """Each timed kernel's DRAM traffic in a run's reports (the roofline's ``dram_bytes``), by
    student, lab and kernel; kernels without one (the lab's model) are left out."""
    found: dict[tuple[str, str, str], float] = {}
    for name in names:
        report = student_report(out, name)
        if not report.is_file():
            continue
        for lab in json.loads(report.read_text()).get("labs", []):
            for kernel, row in (lab.get("timings") or {}).items():
                value = row.get("dram_bytes") if isinstance(row, dict) else None
                if isinstance(value, (int, float)) and value > 0:
                    found[(name, str(lab.get("lab")), str(kernel))] = float(value)
    return found


def print_dram_differences(saved: Path, out: Path, names: list[str], shown: int = 5) -> None:
    """The timed kernels' DRAM traffic against another class run's (``saved``, its results
    folder): figures, not verdicts, so printed, not counted. A figure that moved by more than a
    few percent between two runs of the same code was measured beside other GPU work."""
    earlier, now = dram_figures(saved, names), dram_figures(out, names)
    both = sorted(set(earlier) & set(now))
    if not both:
        return
    moved = sorted(((now[k] / earlier[k] - 1.0, k) for k in both), key=lambda item: -abs(item[0]))
    off = [item for item in moved if abs(item[0]) > 0.05]
    print(f"DRAM traffic of the timed kernels against {saved}: {len(both)} figures, median change "
          f"{statistics.median(abs(d) for d, _ in moved) * 100:.1f}%, {len(off)} moved by more than 5%"
          + (":" if off else ""))
    for change, (name, lab, kernel) in off[:shown]:
        print(f"  {name} {lab} {kernel}: {earlier[(name, lab, kernel)] / 1e6:.1f} MB, now {now[(name, lab, kernel)] / 1e6:.1f} MB "
              f"({change * 100:+.0f}%)")


def _whole(path: Path, text: str) -> None:
    """``text`` written to ``path`` whole: a run ended while it writes leaves the last file."""
    path.with_suffix(".tmp").write_text(text)
    path.with_suffix(".tmp").replace(path)


def keep_elapsed(path: Path, started: float, every_s: float = 5.0) -> Callable[[], float]:
    """Write the run's wall time so far (``started``: ``time.monotonic()`` less the earlier runs')
    to ``path`` every ``every_s`` seconds, until the call returned writes it a last time and
    returns it: a run killed outright (its machine taken back) still leaves what it took, for
    ``--resume`` to add up."""
    done = threading.Event()

    def run() -> None:
        while not done.wait(every_s):
            _whole(path, f"{time.monotonic() - started:.3f}")

    thread = threading.Thread(target=run, name="elapsed", daemon=True)
    thread.start()

    def last() -> float:
        done.set()
        thread.join()
        wall = time.monotonic() - started
        _whole(path, f"{wall:.3f}")
        return wall

    return last


def grade_alone(repos: Path, names: list[str], options: GradeOptions, saved: Path) -> int:
    """--alone-only: every repository of ``names`` graded alone, its verdicts saved as soon as it is graded."""
    done: dict[str, Any] = json.loads(saved.read_text()) if saved.is_file() else {}
    started = time.monotonic()
    try:
        for k, name in enumerate(n for n in names if n not in done):
            t0 = time.monotonic()
            done[name] = alone_verdicts(repos / name, options)
            _whole(saved, json.dumps(done))
            print(f"alone {k + 1}: {name} in {time.monotonic() - t0:.1f} s", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted: {len(done)} of {len(names)} repositories saved in {saved}; go on with --resume")
        return 130
    print(f"graded alone: {len(done)} of {len(names)} repositories saved in {saved} "
          f"({time.monotonic() - started:.1f} s in this run)")
    return 0


def grade_alone_over(work: Path, names: list[str], gpus: list[int], forwarded: list[str]) -> int:
    """--alone-only on several GPUs: slice I of N graded by a process of its own that sees only the
    I-th GPU (``--shard I/N``), the slices at once; their verdicts, and those ``DIR/alone.json``
    already held (each seeds its slice's file, so none is graded again), saved together in it."""
    saved = work / "alone.json"
    done: dict[str, Any] = json.loads(saved.read_text()) if saved.is_file() else {}
    count = len(gpus)
    slices = [work / f"alone-{i}-of-{count}.json" for i in range(1, count + 1)]
    for i, path in enumerate(slices, 1):
        mine = shards.parse(f"{i}/{count}").select(names)
        seeded = {**{n: v for n, v in done.items() if n in mine}, **(json.loads(path.read_text()) if path.is_file() else {})}
        path.write_text(json.dumps(seeded))
    print(f"grading alone over GPUs {', '.join(map(str, gpus))}: a slice of the class on each", flush=True)
    procs = [subprocess.Popen([sys.executable, __file__, *forwarded, "--alone-only", "--keep", str(work), "--resume", "--shard", f"{i}/{count}"],
                              env={**os.environ, **seeing_only(gpu)})
             for i, gpu in enumerate(gpus, 1)]
    try:
        codes = [proc.wait() for proc in procs]
    except KeyboardInterrupt:  # (each slice saves what it graded and stops)
        for proc in procs:
            proc.terminate()
        codes = [proc.wait() for proc in procs]
        codes.append(130)
    for path in slices:
        done.update(json.loads(path.read_text()) if path.is_file() else {})
    _whole(saved, json.dumps(done))
    print(f"graded alone: {len(done)} of {len(names)} repositories saved in {saved}")
    return next((code for code in codes if code), 0)


def print_busy(sampler: BusySampler) -> None:
    for index, samples in sampler.samples.items():
        busy = statistics.fmean(samples) if samples else 0.0
        active = sum(1 for s in samples if s > 0) / len(samples) if samples else 0.0
        print(f"GPU {index} busy: {busy:.0f}% mean NVML utilisation, some kernel running in {100 * active:.0f}% "
              f"of {len(samples)} samples")
    print(f"GPU memory in use at most {max(sampler.memory, default=0.0):.0%}")


def print_cpu(sampler: BusySampler, students: int = 0) -> None:
    cpu = statistics.fmean(sampler.cpu) if sampler.cpu else 0.0
    print(f"CPUs busy: {cpu:.0f}% of {psutil.cpu_count()} CPUs' time on average ({len(sampler.cpu)} samples), "
          f"{max(sampler.cpu, default=0.0):.0f}% at most")
    programs = sampler.by_program()
    if programs:
        host = cpu / 100 * (psutil.cpu_count() or 1) * len(sampler.cpu) * sampler.period
        seen = sum(seconds for seconds, _ in programs.values())
        each = f", {seen / students:.1f} s a student" if students else ""
        print(f"CPU seconds by program, as sampled ({seen:.0f} s of the host's {host:.0f} s{each}; a process shorter than a "
              "sample is missed): " + ", ".join(f"{name} {seconds:.0f} s in {count}" for name, (seconds, count) in list(programs.items())[:8]))


def _labs(out: Path) -> list[dict[str, Any]]:
    return [lab for report in sorted((out / STUDENTS_DIR).glob("*/report.json"))
            for lab in json.loads(report.read_text())["labs"]]


def print_gate_waits(out: Path) -> None:
    """How long timings waited at the health gate for the GPU to be fit (from the reports)."""
    waits = [lab["stage_seconds"].get(HEALTH_GATE, 0.0) for lab in _labs(out)]
    held = [w for w in waits if w]
    print(f"health gate: held {len(held)} of {len(waits)} timings back, {sum(held):.1f} s in all")


def print_worker_starts(out: Path) -> None:
    """How long a lab's worker took to start (CuPy and its CUDA context, as it says; from the
    reports): on a host of several GPUs, where lanes wait on one another's context starts."""
    starts = sorted(float(v) for lab in _labs(out) if isinstance(v := lab["environment"].get(WORKER_START), (int, float)))
    if starts:
        print(f"a lab's worker started in {statistics.median(starts):.2f} s (median of {len(starts)}), "
              f"{starts[len(starts) * 9 // 10]:.2f} s at the 90th percentile, {starts[-1]:.2f} s at most")


def print_retakes(out: Path) -> None:
    """How often a timed call looked disturbed and was taken again, and how many of the students'
    samples still had to be raised to the grader's round trip (from the reports)."""
    timed = [t for lab in _labs(out) for name, t in lab.get("timings", {}).items() if name != "_device" and isinstance(t, dict)]
    again = sum(int(t.get("samples_taken_again", 0)) for t in timed)
    raised = sum(int(t.get("samples_bounded_by_round_trip", 0)) for t in timed)
    print(f"timing: {again} samples taken again over {len(timed)} timed kernels; {raised} of the students' samples raised "
          "to the grader's round trip")


def print_stages(out: Path) -> None:
    """Where the time went: each stage's seconds summed over every lab of every student (a
    student's labs overlap one another, the timing's phases do not)."""
    totals: dict[str, float] = {}
    for lab in _labs(out):
        for stage, seconds in lab["stage_seconds"].items():
            totals[stage] = totals.get(stage, 0.0) + seconds
    shown = ", ".join(f"{k} {v:.1f}" for k, v in sorted(totals.items()) if v >= 0.05)
    print(f"stage seconds, summed over labs: {shown or 'none above 0.05 s'}")


def print_replay_phases(out: Path) -> None:
    """Where a student's counter replay spends its time: each phase summed over the student's labs
    (they replay side by side, but the replayer takes their tasks one at a time: ``queue``), the
    median student (from the reports; nothing where no lab was replayed)."""
    per_student = []
    per_lab: dict[str, list[dict[str, float]]] = {}  # a lab's phases, for each student it was replayed for
    for report in sorted((out / STUDENTS_DIR).glob("*/report.json")):
        sums: dict[str, float] = {}
        for lab in json.loads(report.read_text())["labs"]:
            own = {phase: float(lab["stage_seconds"].get(f"counters.{phase}", 0.0)) for phase in REPLAY_PHASES}
            for phase, seconds in own.items():
                sums[phase] = sums.get(phase, 0.0) + seconds
            if "lab" in lab and any(own.values()):
                per_lab.setdefault(str(lab["lab"]), []).append(own)
        if any(sums.values()):
            per_student.append(sums)
    if per_student:
        shown = ", ".join(f"{p} {statistics.median(s[p] for s in per_student):.2f}" for p in REPLAY_PHASES)
        print(f"the counter replay's phases, seconds summed over a student's labs, median of {len(per_student)} students: {shown}")
    for lab, rows in sorted(per_lab.items()):
        shown = ", ".join(f"{p} {statistics.median(r[p] for r in rows):.2f}" for p in REPLAY_PHASES)
        print(f"  {lab}, median of {len(rows)}: {shown}")


def print_serial(out: Path, gpus: int) -> None:
    """The work each GPU does one student at a time: a student's profiler session (the profiler
    lock) and their timing (the GPU alone). However many seats, a class takes at least their sum
    over its students, shared among the GPUs. The session's seconds are those its counter checks
    report (the run itself, after its waits for the lock and for a turn); the counters stage's where
    none does."""
    profiler = timing = racecheck = 0.0
    students = sorted((out / STUDENTS_DIR).glob("*/report.json"))
    for report in students:
        labs = json.loads(report.read_text())["labs"]
        stages = [lab["stage_seconds"] for lab in labs]
        races = [float(c["measured"]["seconds"]) for lab in labs for c in lab["checks"] if str(c.get("id", "")).startswith("racecheck")
                 and isinstance(c.get("measured"), dict) and isinstance(c["measured"].get("seconds"), (int, float))]
        racecheck += max(races, default=0.0)  # (one run of the student's labs where they shared it)
        runs = [float(c["measured"]["profile_seconds"]) for lab in labs for c in lab["checks"]
                if isinstance(c.get("measured"), dict) and isinstance(c["measured"].get("profile_seconds"), (int, float))]
        # (the labs share one session: its seconds once)
        profiler += max(runs) if runs else max((s.get("counters", 0.0) for s in stages), default=0.0)
        timing += max((s.get("speed.open", 0.0) for s in stages), default=0.0) + sum(
            s.get("speed.sampling", 0.0) + s.get("speed.close", 0.0) for s in stages)
    if students:
        print(f"one student at a time per GPU: profiler {profiler / len(students):.2f} s and timing "
              f"{timing / len(students):.2f} s per student; the class cannot take less than "
              f"{(profiler + timing) / max(1, gpus):.0f} s on {max(1, gpus)} GPU(s)")
        print(f"racecheck {racecheck / len(students):.2f} s per student (racecheck runs of separate processes went one "
              "at a time on an H100; not in the bound above)")


_CASE = re.compile(r"^\[[\w-]+\] correctness \d+/\d+")
_TIMING = re.compile(r"^\[[\w-]+\] timing against ")
_OVER = re.compile(r"^\[[\w-]+\] (sanitizer|counters): every run over after ")
_SECOND = re.compile(r"^\[([\w-]+)\] correctness 2/\d+")  # (the lab's first case is over)


def phases(log: Path) -> str:
    """From the class's lanes.log: the median student's time on its lane in four phases, over the
    students whose labs were timed: from its start to its first correctness case, its cases,
    its tool runs after them (the sanitizers, the replay), and its timing (the labs opened, the
    wait for the GPU's turn, the timed calls and the checks). With several seats, the phase that
    grows is where the seats wait on one another; "" where no student was timed. Where the log says
    when each stage's runs were over, also when (after the last case) its labs' last sanitizer
    and counter runs were; and how long after the student's start each lab's first case was over
    (its worker started, with its CUDA context: where lanes wait on the host's context starts)."""
    marks: dict[str, dict[str, float]] = {}
    for seconds, _, student, text in read_log(log):
        if student == "-":
            continue
        mark = marks.setdefault(student, {"start": seconds})
        if _CASE.match(text):
            mark.setdefault("first case", seconds)
            mark["last case"] = seconds
            if second := _SECOND.match(text):
                mark.setdefault(f"second case {second[1]}", seconds)
        elif _TIMING.match(text):
            mark.setdefault("timing", seconds)
        elif over := _OVER.match(text):
            mark[over[1]] = seconds
        mark["end"] = seconds
    order = ("start", "first case", "last case", "timing", "end")
    timed = [m for m in marks.values() if all(k in m for k in order)]
    if not timed:
        return ""
    spans = [statistics.median(m[b] - m[a] for m in timed) for a, b in zip(order, order[1:])]
    ends = [f"{stage} +{statistics.median(m[stage] - m['last case'] for m in timed if stage in m):.1f} s"
            for stage in ("sanitizer", "counters") if any(stage in m for m in timed)]
    firsts = [statistics.median(after) for m in timed
              if (after := [v - m["start"] for k, v in m.items() if k.startswith("second case ")])]
    return (f"a student's lane, median of {len(timed)} timed: {spans[0]:.1f} s to its first case, its cases {spans[1]:.1f} s, "
            f"its tool runs after them {spans[2]:.1f} s, its timing (opened, its turn, timed, checked) {spans[3]:.1f} s"
            + (f"; its last runs over after its last case: {', '.join(ends)}" if ends else "")
            + (f"; a lab's first case over {statistics.median(firsts):.1f} s after the student's start" if firsts else ""))


def slowest(log: Path, count: int = 3) -> list[str]:
    """From the class's lanes.log: the ``count`` students longest on their lane (or still on it),
    each with its longest pause between two steps and the step before it: where the time went."""
    steps: dict[str, list[tuple[float, str]]] = {}
    for seconds, _, student, text in read_log(log):
        if student != "-":
            steps.setdefault(student, []).append((seconds, text))
    spans = sorted(((s[-1][0] - s[0][0], student, s) for student, s in steps.items()), reverse=True)[:count]
    out = []
    for span, student, s in spans:
        gap, after = max(((b[0] - a[0], a[1]) for a, b in zip(s, s[1:])), default=(0.0, ""))
        out.append(f"{student} {span:.1f} s on its lane; longest pause {gap:.1f} s, after \"{after[:100]}\"")
    return out


def print_figures(out: Path, sampler: BusySampler, on_gpu: bool, gpus: int = 1, graded: int = 0) -> None:
    """The run's figures besides its wall time: the CPUs' (``graded``: the students this run graded),
    the GPU's (busy, health gate, serial work), the stages', and the slowest students."""
    print_cpu(sampler, graded)
    if on_gpu:
        print_busy(sampler)
        print_gate_waits(out)
        print_worker_starts(out)
        print_retakes(out)
        print_serial(out, gpus)
    print_stages(out)
    print_replay_phases(out)
    lane = phases(out / LANES_LOG)
    if lane:
        print(lane)
    for line in slowest(out / LANES_LOG):
        print(f"slowest: {line}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--students", type=int, help="repositories in the class (default: 40, or 20 with --no-gpu)")
    p.add_argument("--no-gpu", action="store_true", help="grade only what needs no GPU")
    p.add_argument("--gpus", help="grade-class --gpus: all (default), or positions among the visible GPUs such as 0")
    p.add_argument("--alone-only", action="store_true", help="grade each repository alone into DIR/alone.json, no class run")
    p.add_argument("--compare-with", type=Path, action="append",
                   help="instead of grading alone, compare with the verdicts --alone-only saved (DIR/alone.json) or with "
                        "another class run's results folder (DIR/results); may be given more than once")
    p.add_argument("--shard", help="with --alone-only: grade the I-th of N slices (I/N) into DIR/alone-I-of-N.json, "
                                   "from a class already built in DIR (one process per GPU)")
    p.add_argument("--no-compare", action="store_true", help="skip grading each repository alone")
    p.add_argument("--warm", action="store_true", help="keep the build cache of GRADER_CACHE_DIR instead of an empty one")
    p.add_argument("--keep", type=Path, help="build the class and its results here (default: a temporary folder, removed)")
    p.add_argument("--resume", action="store_true",
                   help="with --keep: go on with the class a stopped run left there, adding up the runs' wall times")
    p.add_argument("-j", "--jobs", type=int, help="CPU pool size (default: the CPU count)")
    p.add_argument("--per-gpu", type=int, default=1, help="grade-class --per-gpu: students graded at once on each GPU")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per student")
    p.add_argument("--counters", choices=("replay", "ncu"), default="replay", help="grade-class --counters: the replayer (default) or Nsight Compute")
    args = p.parse_args()
    if args.resume and args.keep is None:
        p.error("--resume needs --keep DIR, the folder of the run to go on with")
    if args.alone_only and args.keep is None:
        p.error("--alone-only needs --keep DIR, where its verdicts are saved")
    try:
        shard = shards.parse(args.shard) if args.shard else None
    except GraderError as exc:
        p.error(str(exc))
    if shard is not None and not (args.alone_only and args.resume and (args.keep / "class").is_dir()):
        p.error("--shard grades a slice of a class already built: give it with --alone-only --keep DIR --resume, "
                "DIR holding a class (run the class, or one --alone-only without --shard, first)")
    count = args.students or (20 if args.no_gpu else 40)
    work = args.keep or Path(tempfile.mkdtemp(prefix="grade-class-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    repos, out, elapsed = work / "class", work / "results", work / "elapsed_s.txt"
    resuming = args.resume and repos.is_dir()
    cache = None
    if not args.warm:
        cache = work / "cache"
        if not resuming:
            shutil.rmtree(cache, ignore_errors=True)
        os.environ["GRADER_CACHE_DIR"] = str(cache)
    # every student's tools run: the class's copies of the reference are one compiled library, whose runs kept
    # from the first would spare every later copy the profiler and the sanitizers, as a real class's distinct code is not
    options = GradeOptions(gpu=not args.no_gpu, cache_dir=cache, reuse_tool_runs=False, counter_source=args.counters)
    before = float(elapsed.read_text()) if resuming and elapsed.is_file() else 0.0
    if resuming:
        names = sorted(d.name for d in repos.iterdir() if d.is_dir())
    else:
        shutil.rmtree(repos, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        names = build_class(repos, count)
    # `timeout` ends a long run: its figures so far are still printed, and as grade-class does, the
    # students in flight are not published (a resumed run grades them)
    # a slice's process gets a stop twice (the group's signal, then its parent's): once stopped it prints only its
    # line on what it saved, not the traceback of the second signal reaching its threads' shutdown
    stopping.install(quiet=shard is not None)
    if args.alone_only and shard is None and len(spread := [s.index for s in gpu_slots(options, args.gpus)]) > 1:
        forwarded = ["--students", str(count), "--counters", args.counters, *(["--warm"] if args.warm else [])]
        return grade_alone_over(work, names, spread, forwarded)
    if args.alone_only:
        chosen = shard.select(names) if shard else set(names)
        mine = [n for n in names if n in chosen]
        return grade_alone(repos, mine, options, work / (f"alone-{shard.index}-of-{shard.count}.json" if shard else "alone.json"))
    slots = gpu_slots(options, args.gpus)
    print(f"class of {len(names)} repositories, {len(lab_ids())} labs each; {args.per_gpu} per GPU; lanes: "
          f"{', '.join(s.lane + ' ' + s.name for s in slots) or 'CPU only'}; {usable_cpus()} CPUs; "
          f"build cache {'warm' if args.warm else 'cold'}; counters: {args.counters}"
          + (f"; going on after {before:.1f} s of earlier runs" if resuming else ""), flush=True)
    started = time.monotonic() - before  # a resumed run's wall time includes the earlier runs'
    wall_time = keep_elapsed(elapsed, started)
    try:
        with BusySampler([s.index for s in slots]) as sampler:
            run = grade_class(roster.from_folder(repos), options, ClassOptions(out, gpus=args.gpus, jobs=args.jobs, per_gpu=args.per_gpu),
                              Display(quiet=args.quiet))
    except KeyboardInterrupt:
        wall = wall_time()
        done = len(list((out / STUDENTS_DIR).glob("*/report.json")))
        print(f"\ninterrupted after {wall:.1f} s with {done} of {len(names)} repositories graded"
              + (f" ({wall / done:.2f} s each, the cold start included)" if done else "")
              + (f"; go on with --keep {work} --resume" if args.keep else ""))
        print_figures(out, sampler, bool(slots), len(slots), 0 if resuming else done)
        return 130
    wall = wall_time()
    per = [r.seconds for r in run.graded] or [0.0]
    kept = f" ({len(run.skipped)} in earlier runs)" if run.skipped else ""
    print(f"\ngraded {len(names)} repositories{kept} in {wall:.1f} s: {wall / len(names):.2f} s per repository amortised "
          f"(each took {statistics.median(per):.1f} s median, {max(per):.1f} s at most, on its lane)")
    print_figures(out, sampler, bool(slots), len(slots), len(run.graded))
    if slots:
        print(f"target: {'met' if wall <= 480 and len(names) >= 40 else 'compare with'} <= 8 min for 40 repositories on one H100")
    else:
        print(f"target: <= 60 s for 20 repositories with --no-gpu, cold, on 2 cores: "
              f"{'met' if wall <= 60 else 'missed'} ({wall:.1f} s)")
    errors = [r for r in run.rows if r.problems]
    print(f"{len(errors)} students with errors in their row (expected: the compile error, the hang on a GPU, "
          f"missing labs, no labs/ folder, known-wrong solutions that crash)")
    status = 0
    if not args.no_compare:
        t0 = time.monotonic()
        given = args.compare_with or []
        alone_files = [path for path in given if not path.is_dir()]  # one file, or its shards' files: together
        against = [(f"as in {path}", compare_with([path], out, names)) for path in given if path.is_dir()]
        if alone_files:
            against.append((f"as in {', '.join(map(str, alone_files))}", compare_with(alone_files, out, names)))
        if not against:
            differences = compare(repos, out, names, options)
            against = [(f"each repository alone ({time.monotonic() - t0:.1f} s)", differences)]
        allowed = borderline(count)
        for what, differences in against:
            counted = [d for d in differences if not allowed(d)]
            print(f"\n{what}: " + ("every verdict the same as in the class" if not differences else
                                   f"{plural(len(counted), 'verdict')} differ" + (":" if counted else "")))
            for name, _, _, line in counted:
                print(f"  {name}: {line}")
            expected_any = [d for d in differences if allowed(d)]
            if expected_any:
                print(f"  and {plural(len(expected_any), 'verdict')} of checks whose expected verdict is `any` "
                      "(listed, not counted):")
                for name, _, _, line in expected_any:
                    print(f"  {name}: {line}")
            status = 1 if counted else status
        for path in given:
            if path.is_dir():
                print_dram_differences(path, out, names)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
