"""Every lab as instructors see it: READMEs current, known solutions' verdicts (the checks that
need no GPU run here; the GPU tests run the rest), one lab's failure contained in a batch."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from grader import cli
from grader.course import readme
from grader.course.validate import judge, load_solutions, render, validate
from grader.engine.grade import LabGrading
from grader.engine.repo import grade_many
from grader.errors import SpecError
from grader.isolation.options import GradeOptions
from grader.labspec.labs import find_lab, lab_ids
from grader.labspec.specload import load_lab
from grader.outcome import Outcome

ROOT = Path(__file__).resolve().parent.parent
LABS = lab_ids()


def test_the_five_labs_of_the_course_are_there():
    assert LABS == ["boundary_checks", "corner_turning", "histogram", "memory_types", "tiled_matmul"]


@pytest.mark.parametrize("lab_id", LABS)
def test_readme_is_generated_from_the_yaml(lab_id):
    spec = find_lab(lab_id)
    text = readme.render(spec)
    for path in readme.targets(spec):
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run `cuda-grader readme`"
    for check in (*spec.static, *spec.sanitizers, *(spec.benchmark.checks if spec.benchmark else ()), *spec.counters):
        assert f"`{check.id}`" in text
    assert spec.launcher.name + "(" in text
    wrong = [s for s in load_solutions(spec) if s.file.parent.name == "wrong"]
    assert wrong, f"{lab_id} has no known-wrong solutions"
    for sol in wrong:  # the common failures are the lab's known-wrong solutions
        why = " ".join(sol.why.split())
        assert why[1:] in text, why


@pytest.mark.slow
@pytest.mark.parametrize("lab_id", LABS)
def test_known_solutions_compile_and_static_verdicts(lab_id):
    spec = find_lab(lab_id)
    results = validate(spec, GradeOptions(gpu=False))
    assert all(r.ok for r in results), render(spec, results)
    # the GPU checks were skipped, not compared (a file that does not compile has none to skip)
    assert all(r.unchecked for r in results if r.report.checks[0].outcome is Outcome.PASS)


@pytest.fixture
def lab_copy(tmp_path) -> Path:
    for part in ("labs/tiled_matmul", "reference/tiled_matmul", "student_template/labs/tiled_matmul"):
        shutil.copytree(ROOT / part, tmp_path / part)
    shutil.copy(ROOT / "labs" / readme.TEMPLATE, tmp_path / "labs" / readme.TEMPLATE)
    return tmp_path / "labs" / "tiled_matmul"


def test_a_wrong_expectation_is_reported_as_a_mismatch(lab_copy):
    expected = lab_copy / "solutions" / "expected.yaml"
    text = expected.read_text()
    old = "verdicts: {compile: pass, shared_memory_tiles: fail, \"correctness[*]\": error, \"*\": fail}"
    assert text.count(old) == 4
    expected.write_text(text.replace(old, old.replace("shared_memory_tiles: fail", "shared_memory_tiles: pass"), 1))
    spec = load_lab(lab_copy)
    solutions = [s for s in load_solutions(spec) if s.file.name in ("infinite_loop.cu", "reference.cu")]
    reports = grade_many([(spec, s.file, s.file.name) for s in solutions], GradeOptions(gpu=False))
    results = [judge(s, r) for s, r in zip(solutions, reports)]
    bad = {r.solution.file.name: r for r in results if not r.ok}
    assert list(bad) == ["infinite_loop.cu"]
    (m,) = bad["infinite_loop.cu"].mismatches
    assert (m.check, m.got, m.expected) == ("shared_memory_tiles", "fail", "pass")
    assert "MISMATCH" in render(spec, results) and "1 of 2 solutions differ" in render(spec, results)


def test_an_unlisted_known_solution_is_an_error(lab_copy):
    (lab_copy / "solutions" / "wrong" / "forgotten.cu").write_text("// not listed\n")
    with pytest.raises(SpecError, match="wrong/forgotten.cu has no expected verdicts"):
        load_solutions(load_lab(lab_copy))


def _check_lab(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What `cuda-grader check-lab` says of a lab it refuses: one line, no trace."""
    assert cli.main(["check-lab", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_check_lab_refuses_a_launcher_the_interface_header_does_not_declare(lab_copy, capsys):
    """Every student's file, and the reference, would fail to link: the lab is refused before anyone is graded."""
    yaml_path = lab_copy / "lab.yaml"
    _edit(yaml_path, "launcher:\n  name: matmul\n", "launcher:\n  name: matmul_tiled\n")
    err = _check_lab(yaml_path, capsys)
    assert err == (f"error: {yaml_path}: launcher.name: 'matmul_tiled' is not declared in the interface header interface.h, "
                   "so every student's file and the reference would fail to link (it declares: matmul); did you mean 'matmul'?\n")
    _edit(yaml_path, "name: matmul_tiled\n", "name: matmul\n")
    assert cli.main(["check-lab", str(yaml_path)]) == 0 and capsys.readouterr().out.endswith(": ok (5 correctness cases, 24 points)\n")
    # named in a comment only, or declared without C linkage (a C++ symbol the linker never finds under that name)
    header = lab_copy / "interface.h"
    _edit(header, 'extern "C" void matmul(', '// matmul(M, N, P, width) is yours to write\nextern "C" void matmul2(')
    assert "launcher.name: 'matmul' is not declared in the interface header interface.h" in _check_lab(yaml_path, capsys)
    _edit(header, 'extern "C" void matmul2(', "void matmul(")
    assert ("launcher.name: 'matmul' is declared in interface.h without extern \"C\": its symbol would be the C++ mangled name"
            in _check_lab(yaml_path, capsys))
    _edit(header, "void matmul(", '#ifdef __cplusplus\nextern "C" {\n#endif\nvoid matmul(')
    header.write_text(header.read_text() + '#ifdef __cplusplus\n}\n#endif\n')
    assert cli.main(["check-lab", str(yaml_path)]) == 0, capsys.readouterr().err  # the C block form is C linkage too


def test_check_lab_refuses_an_id_that_is_not_the_folders_name(lab_copy, capsys):
    """The folder finds the lab and the id names the student's file: they would disagree."""
    yaml_path = lab_copy / "lab.yaml"
    _edit(yaml_path, "id: tiled_matmul\n", "id: tiled_matmul_2026\n")
    err = _check_lab(lab_copy, capsys)
    assert err.startswith(f"error: {yaml_path}: id: 'tiled_matmul_2026' is not the lab's folder name ('tiled_matmul'): ")
    assert "write id: tiled_matmul, or rename the folder" in err


def test_one_failing_submission_does_not_take_down_the_batch(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "internal-errors.log"))
    spec = find_lab("tiled_matmul")
    real_start = LabGrading.start

    def start(self):
        if self.name == "boom.cu":
            raise RuntimeError("simulated grader bug")
        return real_start(self)

    monkeypatch.setattr(LabGrading, "start", start)
    items = [(spec, spec.files.reference, "boom.cu"), (spec, spec.files.reference, "fine.cu")]
    boom, fine = grade_many(items, GradeOptions(gpu=False))
    assert boom.checks[0].outcome is Outcome.ERROR
    assert "internal grader error" in boom.checks[0].message and "simulated grader bug" in boom.checks[0].message
    assert all(c.outcome is Outcome.ERROR for c in boom.checks)
    assert fine.checks[0].outcome is Outcome.PASS and fine.submission == "fine.cu"


def test_the_labs_of_a_window_start_together_and_keep_their_order():
    """Starting (compile, static checks, correctness) overlaps across a window: each start here
    waits until all three have begun, which sequential starts would never reach."""
    spec = find_lab("tiled_matmul")
    real_start = LabGrading.start
    all_begun = threading.Barrier(3, timeout=20)

    def start(self):
        all_begun.wait()
        return real_start(self)

    items = [(spec, spec.files.reference, f"{name}.cu") for name in ("a", "b", "c")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LabGrading, "start", start)
        reports = grade_many(items, GradeOptions(gpu=False), window=3)
    assert [r.submission for r in reports] == ["a.cu", "b.cu", "c.cu"]
    assert all(r.checks[0].outcome is Outcome.PASS for r in reports), [r.checks[0].message for r in reports]


def test_a_lab_is_scored_beside_the_next_labs_timing_and_a_scoring_bug_stays_its_own(monkeypatch, tmp_path):
    """Timing is one lab at a time; checking a timed output is CPU work that overlaps the next
    lab's timing: here the first lab's scoring waits until the second lab has been timed, which
    one-after-the-other grading would never reach."""
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "internal-errors.log"))
    spec = find_lab("tiled_matmul")
    second_timed = threading.Event()
    order: list[str] = []
    real_timed, real_report = LabGrading.timed, LabGrading.report

    def timed(self):
        order.append(f"timed {self.name}")
        if self.name == "b.cu":
            second_timed.set()
        return real_timed(self)

    def report(self):
        if self.name == "a.cu":
            assert second_timed.wait(20), "the first lab's scoring held up the second lab's timing"
        if self.name == "b.cu":
            raise RuntimeError("simulated scoring bug")
        order.append(f"scored {self.name}")
        return real_report(self)

    monkeypatch.setattr(LabGrading, "timed", timed)
    monkeypatch.setattr(LabGrading, "report", report)
    items = [(spec, spec.files.reference, f"{name}.cu") for name in ("a", "b", "c")]
    a, b, c = grade_many(items, GradeOptions(gpu=False), window=3)
    assert order.index("timed b.cu") < order.index("scored a.cu")
    assert [r.submission for r in (a, b, c)] == ["a.cu", "b.cu", "c.cu"]
    assert a.checks[0].outcome is Outcome.PASS and c.checks[0].outcome is Outcome.PASS
    assert b.checks[0].outcome is Outcome.ERROR and "simulated scoring bug" in b.checks[0].message


def test_a_grader_bug_in_a_background_run_becomes_errors_on_its_checks(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "internal-errors.log"))
    spec = find_lab("histogram")
    grading = LabGrading(spec, spec.files.reference, GradeOptions(gpu=False))

    def broken():
        raise RuntimeError("simulated profiler bug")

    from grader.outcome import Stage

    results = grading.background._guarded(Stage.SANITIZER, broken, ())
    assert [c.id for c in results] == [s.id for s in spec.sanitizers]
    assert all(c.outcome is Outcome.ERROR and "simulated profiler bug" in c.message for c in results)
    one = spec.sanitizers[-1].id  # a batch of one check (each sanitizer runs in its own): errors on that check only
    assert [c.id for c in grading.background._guarded(Stage.SANITIZER, broken, (one,))] == [one]
    assert "simulated profiler bug" in (tmp_path / "internal-errors.log").read_text()
    assert grading.clock.seconds["sanitizer"] >= 0


def test_the_histogram_case_below_a_is_that_byte_whatever_the_secret_seed():
    """Graded cases are seeded from a secret, so a pinned verdict may not hang on one seed's draw:
    a kernel that folds uppercase in must pass this case every time, and a kernel that checks
    the letter range only from above must fail it every time."""
    import numpy as np

    from grader.labspec.labs import load_problem

    spec = find_lab("histogram")
    case = next(c for c in spec.correctness.cases if c.name == "one_nonletter_n1")
    problem = load_problem(spec)
    for seed in (0, 1, 118, 2**31 - 1, 12345):
        assert problem.generate(case.params, seed, np)["text"].tolist() == [ord("`")]


def test_the_histogram_texts_draw_each_byte_at_its_share_and_every_byte_of_their_mixture():
    """English-like text is drawn from a table of 65,536 bytes: every byte of the mixture keeps
    a place in it (the rarest, uppercase 'Z', 1.5 in 100,000), and a drawn text's letters come at
    English frequencies (the letters are 78% of it)."""
    import numpy as np

    from grader.labspec.labs import load_problem

    problem = load_problem(find_lab("histogram"))
    english = problem.generate({"n": 1 << 20, "text": "english"}, 7, np)["text"]
    assert english.dtype == np.uint8 and english.shape == (1 << 20,)
    share = np.bincount(english, minlength=256) / len(english)
    for letter, percent in zip("abcdefghijklmnopqrstuvwxyz", problem._FREQ):
        assert abs(share[ord(letter)] - 0.78 * percent / sum(problem._FREQ)) < 0.002, letter
    assert abs(share[ord(" ")] - 0.16) < 0.002
    kinds = {"english": 26 + 1 + 26 + 22, "uppercase": 26 + 26 + 1, "no_letters": 2 + 65 + 4}
    for kind, values in kinds.items():
        assert len(set(problem._TABLES[kind].tolist())) == values, kind
    assert not set(problem.generate({"n": 1 << 16, "text": "no_letters"}, 3, np)["text"].tolist()) & set(range(97, 123))


def test_a_race_is_suggested_only_when_repeated_runs_disagree():
    from grader.checks.correctness import repeats_summary

    assert repeats_summary(5, 5, 1) == "wrong on 5 of 5 runs of the same input, the same answer every time"
    assert repeats_summary(2, 5, 3) == "wrong on 2 of 5 runs of the same input, and the runs disagree (a race?)"


def test_nan_messages_mention_out_of_bounds_accesses_that_memcheck_saw():
    from grader.checks.sanitizer import explain_nans
    from grader.outcome import CheckResult, Stage

    spec = find_lab("boundary_checks")
    memcheck = next(s for s in spec.sanitizers if s.tool == "memcheck")
    nan = CheckResult("correctness[m=3,n=1000,k=5]", Stage.CORRECTNESS, Outcome.FAIL, 0, 2,
                      "P: all 15 elements are NaN (the grader fills outputs with NaN before each call: was P never written?)")
    other = CheckResult("correctness[m=1,n=1,k=1]", Stage.CORRECTNESS, Outcome.FAIL, 0, 2, "P: 1 of 1 elements wrong")
    dirty = CheckResult(memcheck.id, Stage.SANITIZER, Outcome.FAIL, 0, 2, "memcheck reported 3 error(s)")
    clean = CheckResult(memcheck.id, Stage.SANITIZER, Outcome.PASS, 2, 2, "memcheck: nothing")
    explained = explain_nans([nan, other], [dirty], spec)
    assert explained[0].message.endswith(f"; memcheck saw out-of-bounds accesses ({memcheck.id}): reads past a buffer "
                                         "bring in NaN or stale values")
    assert explained[1] == other
    assert explain_nans([nan, other], [clean], spec) == [nan, other]


@pytest.mark.parametrize("n", [0, 1, 2, 7, 15, 16, 1000, 3 * 64 + 5])
def test_the_convolution_oracle_is_the_lab_definition_term_by_term(n):
    """memory_types' oracle (chunked for speed: chunks of 64 here, on one thread or several) against out[i] = sum_j
    mask[j] * in[i + j - r], with terms outside [0, n) zero, summed in mask order in float64."""
    import numpy as np

    from grader.labspec.labs import load_problem

    problem = load_problem(find_lab("memory_types"))
    for width in (1, 5, 15):
        inputs = problem.generate({"n": n, "mask_width": width}, n * 31 + width, np)
        x, mask, r = inputs["in"].astype(np.float64), inputs["mask"].astype(np.float64), width // 2
        want = np.zeros(n)
        for i in range(n):
            for j in range(width):
                if 0 <= i + j - r < n:
                    want[i] += mask[j] * x[i + j - r]
        for threads in (1, 3):  # the chunks one after another, or spread over threads
            got = problem.expected(inputs, {"n": n, "mask_width": width}, chunk=64, threads=threads)["out"]
            assert got.dtype == np.float64 and np.array_equal(got, want), (n, width, threads)


def test_the_histogram_oracle_counts_letters_in_bins_of_four_across_chunks():
    import collections

    import numpy as np

    from grader.labspec.labs import load_problem

    problem = load_problem(find_lab("histogram"))
    text = np.random.default_rng(7).integers(0, 256, 10_007, dtype=np.uint8)
    got = problem.expected({"text": text}, {}, chunk=1000)["bins"]
    counted = collections.Counter((b - ord("a")) // 4 for b in text.tolist() if ord("a") <= b <= ord("z"))
    assert got.dtype == np.uint32 and got.tolist() == [counted[k] for k in range(7)]
    assert problem.expected({"text": np.zeros(0, np.uint8)}, {})["bins"].tolist() == [0] * 7


@pytest.mark.parametrize("named,problem", [
    (17, None),
    (18, "coalesced_loads names line 18, expected line 17: "),
    (None, "coalesced_loads names no line, expected line 17: "),
])
def test_a_known_solution_must_name_its_expected_line(named, problem):
    """expected.yaml's `lines` pin where a failing check points (a counter's worst line, a
    sanitizer finding): validation fails where the check names another line, or none."""
    from grader.outcome import CheckResult, LabReport, Outcome, SourceLocation, Stage

    spec = find_lab("corner_turning")
    (solution,) = [s for s in load_solutions(spec) if s.file.name == "uncoalesced_tile.cu"]
    assert dict(solution.lines) == {"coalesced_loads": 17}
    where = SourceLocation("uncoalesced_tile.cu", named) if named else None
    checks = tuple(CheckResult(c.id, Stage.COUNTERS, Outcome.FAIL if c.id == "coalesced_loads" else Outcome.PASS, 0, 1, "m",
                               location=where if c.id == "coalesced_loads" else None)
                   for c in spec.counters)
    result = judge(solution, LabReport(spec.id, spec.title, "uncoalesced_tile.cu", checks))
    found = [p for p in result.problems if "names" in p]
    assert (found[0].startswith(problem) if problem else found == []), found


def test_a_cold_batch_rehearses_its_timing_in_the_background_and_times_after_it(monkeypatch, tmp_path):
    """On an empty kernel cache a batch rehearses the labs' timing beside their correctness cases
    (``engine.rehearsal``), and the first timing waits for it; a full cache, or no timing, none."""
    from grader.engine import repo
    from grader.host import gpu
    from grader.isolation.options import kernel_cache

    h100 = gpu.GpuProbe(gpu.GpuInfo("NVIDIA H100 80GB HBM3", (9, 0), "580.65"))
    monkeypatch.setattr(repo, "probe_for", lambda options: h100)
    asked, let_go = [], threading.Event()
    monkeypatch.setattr(repo, "rehearse_timings", lambda specs, options, progress: (asked.append([s.id for s in specs]), let_go.wait(20)))
    spec = find_lab("tiled_matmul")
    options = GradeOptions(cache_dir=tmp_path / "cache")
    rehearsal = repo._rehearsed_if_cold([spec], options, print, repo._kernels_cold(options))
    assert rehearsal is not None and rehearsal.is_alive() and asked == [["tiled_matmul"]]
    let_go.set()
    rehearsal.join(20)
    assert not repo._kernels_cold(GradeOptions(cache_dir=tmp_path / "cache", timing=False))
    assert repo._rehearsed_if_cold([spec], options, print, False) is None
    (tmp_path / "cache" / "cupy-kernels" / "a.cubin").write_bytes(b"")
    assert not repo._kernels_cold(options)  # (warm: nothing to ready)

    # the cache is looked at before the trusted worker starts, which compiles into it as it starts
    seen: list[bool] = []
    monkeypatch.setattr(repo, "_trusted_ahead", lambda options: (kernel_cache(options) / "fill.cubin").write_bytes(b""))
    monkeypatch.setattr(repo, "_rehearsed_if_cold", lambda specs, options, progress, cold: seen.append(cold))
    fresh = GradeOptions(cache_dir=tmp_path / "fresh")
    missing = [(spec, tmp_path / "missing" / f"{name}.cu", f"{name}.cu") for name in ("a", "b")]
    for _ in range(2):
        assert [r.score for r in grade_many(missing, fresh, window=2)] == [0, 0]
    assert seen == [True, False]

    ended = threading.Event()

    def slow() -> None:
        threading.Event().wait(0.5)
        ended.set()

    order: list[bool] = []
    real_timed = LabGrading.timed
    monkeypatch.setattr(LabGrading, "timed", lambda self: (order.append(ended.is_set()), real_timed(self))[1])
    monkeypatch.setattr(repo, "_rehearsed_if_cold", lambda specs, options, progress, cold: (t := threading.Thread(target=slow), t.start(), t)[2])
    items = [(spec, spec.files.reference, f"{name}.cu") for name in ("a", "b")]
    grade_many(items, GradeOptions(gpu=False), window=2)
    assert order == [True, True]  # (each timing came after the rehearsal ended)
