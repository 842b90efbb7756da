"""Generated inputs and oracle answers kept between grades: computed once, keyed by what they
depend on, never trusted when unreadable."""

from types import SimpleNamespace

import numpy as np

from grader.checks import compare
from grader.labspec.labs import find_lab, load_problem


class Counting:
    """A lab's problem module that counts its generator's and oracle's calls."""

    def __init__(self, lab: str):
        self.real = load_problem(find_lab(lab))
        self.calls = {"generate": 0, "expected": 0}

    def generate(self, params, seed, xp):
        self.calls["generate"] += 1
        return self.real.generate(params, seed, xp)

    def expected(self, inputs, params):
        self.calls["expected"] += 1
        return self.real.expected(inputs, params)


def test_inputs_are_generated_once_per_case_and_seed(tmp_path):
    spec, problem = find_lab("histogram"), Counting("histogram")
    params = {"n": 5000, "text": "english"}
    first = compare.generated(spec, problem, params, 7, tmp_path)
    again = compare.generated(spec, problem, dict(reversed(list(params.items()))), 7, tmp_path)
    assert problem.calls["generate"] == 1
    assert np.array_equal(first["text"], again["text"]) and again["text"].dtype == first["text"].dtype
    other = compare.generated(spec, problem, params, 8, tmp_path)
    assert problem.calls["generate"] == 2 and not np.array_equal(first["text"], other["text"])
    entries = list((tmp_path / "cases").rglob("*.npz"))
    assert len(entries) == 2 and all(p.stat().st_mode & 0o077 == 0 for p in entries)
    assert (tmp_path / "cases").stat().st_mode & 0o777 == 0o700  # the secret cases' answers: this user's only


def test_answers_are_keyed_by_the_very_inputs_they_answer(tmp_path):
    spec, problem = find_lab("histogram"), Counting("histogram")
    params = {"n": 4096}
    text = np.frombuffer(b"abcd" * 1024, dtype=np.uint8)
    want = compare.expected(spec, problem, {"text": text}, params, tmp_path)
    assert np.array_equal(compare.expected(spec, problem, {"text": text.copy()}, params, tmp_path)["bins"], want["bins"])
    assert problem.calls["expected"] == 1
    changed = text.copy()
    changed[0] = ord("z")  # one byte differs: a new answer
    assert not np.array_equal(compare.expected(spec, problem, {"text": changed}, params, tmp_path)["bins"], want["bins"])
    assert problem.calls["expected"] == 2


def test_a_damaged_entry_is_computed_again(tmp_path):
    spec, problem = find_lab("tiled_matmul"), Counting("tiled_matmul")
    params = {"width": 16}
    first = compare.generated(spec, problem, params, 3, tmp_path)
    (entry,) = (tmp_path / "cases").rglob("*.npz")
    entry.write_bytes(entry.read_bytes()[:40])
    again = compare.generated(spec, problem, params, 3, tmp_path)
    assert problem.calls["generate"] == 2
    assert all(np.array_equal(first[k], again[k]) for k in first)


def test_without_a_cache_folder_or_for_values_that_are_not_arrays_nothing_is_kept(tmp_path):
    spec, problem = find_lab("tiled_matmul"), Counting("tiled_matmul")
    compare.generated(spec, problem, {"width": 16}, 3, None)
    compare.generated(spec, problem, {"width": 16}, 3, None)
    assert problem.calls["generate"] == 2
    odd = SimpleNamespace(expected=lambda inputs, params: {"n": 3})
    assert compare.inputs_digest({"n": 3}) is None
    assert compare.expected(spec, odd, {"n": 3}, {}, tmp_path) == {"n": 3}  # type: ignore[arg-type]
    assert not (tmp_path / "cases").exists()


def test_an_answer_too_large_for_the_disk_is_kept_in_the_run_within_its_limit(tmp_path, monkeypatch):
    """A timed case's answer (512 MB) is not written to disk: the run keeps it for the baselines'
    replays and later students, read-only, the oldest let go beyond the run's limit."""
    from grader.context import RunContext, entered

    spec, problem = find_lab("histogram"), Counting("histogram")
    monkeypatch.setattr(compare, "ENTRY_LIMIT_BYTES", 16)  # (the 7 bins of uint32: 28 bytes)
    monkeypatch.setattr(compare, "RUN_LIMIT_BYTES", 60)  # room for two answers
    texts = [np.frombuffer(bytes([ord("a") + i]) * 64, dtype=np.uint8) for i in range(3)]
    with entered(RunContext()) as run:
        first = compare.expected(spec, problem, {"text": texts[0]}, {"n": 64}, tmp_path)
        again = compare.expected(spec, problem, {"text": texts[0].copy()}, {"n": 64}, tmp_path)
        assert problem.calls["expected"] == 1 and again["bins"] is first["bins"] and not again["bins"].flags.writeable
        assert not list((tmp_path / "cases").rglob("*.npz")) and len(run.answers) == 1
        for text in texts[1:]:
            compare.expected(spec, problem, {"text": text}, {"n": 64}, tmp_path)
        assert len(run.answers) == 2 and problem.calls["expected"] == 3
        compare.expected(spec, problem, {"text": texts[0]}, {"n": 64}, tmp_path)
        assert problem.calls["expected"] == 4  # (let go for the third)
    with entered(RunContext()):
        compare.expected(spec, problem, {"text": texts[2]}, {"n": 64}, tmp_path)
        assert problem.calls["expected"] == 5  # another run keeps its own


def test_a_graded_case_of_the_runs_own_secret_is_kept_in_the_run_not_on_disk(tmp_path, monkeypatch):
    """A run's own secret is new with every run: its cases, drawn again by no later run, stay in
    the run (each grade of a repository left some 80 MB on disk). A given secret's go to disk."""
    from grader.context import RunContext, current, entered
    from grader.isolation.options import GradeOptions, secret_given, secret_of

    spec, problem = find_lab("histogram"), Counting("histogram")
    monkeypatch.delenv("GRADER_SECRET", raising=False)
    with entered(RunContext()):
        own = secret_of(GradeOptions())
        assert own == current().secret and not secret_given(own)
        for _ in range(2):
            inputs = compare.generated(spec, problem, {"n": 5000, "text": "english"}, 7, tmp_path, on_disk=False)
            compare.expected(spec, problem, inputs, {"n": 5000}, tmp_path, on_disk=False)
        assert problem.calls == {"generate": 1, "expected": 1} and len(current().answers) == 2
        assert not list(tmp_path.rglob("*.npz"))
        monkeypatch.setenv("GRADER_SECRET", "the course's")
        assert secret_given(secret_of(GradeOptions()))
    with entered(RunContext()):  # a new run: the case is drawn again
        compare.generated(spec, problem, {"n": 5000, "text": "english"}, 7, tmp_path, on_disk=False)
        assert problem.calls["generate"] == 2


def test_a_correctness_case_keeps_its_inputs_on_disk_only_for_a_given_secret(tmp_path, monkeypatch):
    """What a graded case asks of the cache follows whose secret seeded it."""
    from grader.checks import correctness
    from grader.context import RunContext, entered

    class Asked(Exception):
        pass

    def write_inputs(*args, **kwargs):
        raise Asked(args[-1])  # (the case goes no further: only what it asked for counts here)

    monkeypatch.setattr(correctness, "write_inputs", write_inputs)
    spec = find_lab("tiled_matmul")
    worker = SimpleNamespace(dirs=SimpleNamespace(inbox=tmp_path))
    with entered(RunContext()) as run:
        for secret, on_disk in ((run.secret, False), ("the course's", True)):
            sub = SimpleNamespace(spec=spec, problem=None, cache_dir=tmp_path, secret=secret)
            try:
                correctness.grade_case(sub, worker, worker, spec.correctness.cases[0], "case0")
            except Asked as asked:
                assert asked.args[0] is on_disk
            else:
                raise AssertionError("the case did not ask for its inputs")
