"""lab.yaml and expected.yaml loading: the real files, every error path, and the expression language."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from grader.errors import GraderError, SpecError
from grader.labspec.spec import ExpectedSolution, LabSpec
from grader.labspec.specload import load_expected, load_lab
from grader.worker import expr

ROOT = Path(__file__).resolve().parent.parent
LAB_DIR = ROOT / "labs" / "tiled_matmul"
LAB_YAML = LAB_DIR / "lab.yaml"


# ------------------------------------------------------------------ the real lab


@pytest.fixture(scope="module")
def spec() -> LabSpec:
    return load_lab(LAB_YAML)


def test_real_lab_loads_with_its_values(spec):
    assert spec.id == "tiled_matmul"
    assert spec.title == "Tiled matrix multiplication"
    assert spec.source == LAB_YAML
    assert spec.root == LAB_DIR.resolve()
    # relative paths are resolved against the yaml's folder
    assert spec.files.header == (LAB_DIR / "interface.h").resolve()
    assert spec.files.reference == (ROOT / "reference" / "tiled_matmul" / "reference.cu").resolve()
    assert spec.files.baselines["naive"] == (ROOT / "reference" / "tiled_matmul" / "naive.cu").resolve()
    assert spec.baseline_source("reference") == spec.files.reference
    assert spec.baseline_source("naive") == spec.files.baselines["naive"]

    assert spec.launcher.name == "matmul"
    assert [a.name for a in spec.launcher.args] == ["M", "N", "P", "width"]
    assert [a.role for a in spec.launcher.args] == ["input", "input", "output", "scalar"]
    assert spec.launcher.args[0].shape == ("width", "width")
    assert spec.launcher.args[3].ctype == "int"

    assert spec.tolerance.kind == "float"
    assert spec.tolerance.rtol == pytest.approx(1e-5)
    assert spec.tolerance.reduction_length == "width"

    assert [c.params["width"] for c in spec.correctness.cases] == [16, 48, 112, 512, 1024]
    assert spec.correctness.cases[0].seed == 11
    assert spec.correctness.cases[0].label == "width=16"
    assert spec.correctness.time_limit_s == 10.0

    assert [s.require for s in spec.static] == ["shared_memory"]
    assert spec.benchmark is not None
    assert spec.benchmark.params["width"] == 2048
    assert spec.benchmark.timing.budget_s == 1.5
    assert [c.id for c in spec.benchmark.checks] == ["speedup_vs_naive", "speed_vs_reference"]
    assert [c.id for c in spec.counters] == ["global_load_reduction"]
    assert spec.counters[0].full == 8.0 and spec.counters[0].zero == 2.0
    assert [(s.id, s.tool, s.params["width"]) for s in spec.sanitizers] == [
        ("memcheck_clean", "memcheck", 48), ("synccheck_clean", "synccheck", 48), ("racecheck_clean", "racecheck", 48)]
    assert spec.sanitizers[0].time_limit_s == 120.0  # the default
    # defaults for sections the yaml leaves out
    assert spec.compile.flags == ("-O3",)
    assert spec.max_points == 24


def test_real_lab_loads_from_its_folder_too(spec):
    assert load_lab(LAB_DIR) == spec


def test_records_are_frozen(spec):
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.id = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.correctness.cases[0].seed = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.launcher.args[0].name = "X"  # type: ignore[misc]
    # mappings are read-only views, lists became tuples
    with pytest.raises(TypeError):
        spec.correctness.cases[0].params["width"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.files.baselines["fast"] = Path("x")  # type: ignore[index]
    assert isinstance(spec.correctness.cases, tuple)


# ------------------------------------------------------------------ error paths


@pytest.fixture
def lab_copy(tmp_path) -> Path:
    """A copy of the lab (and the files its yaml points at), so edited yamls still resolve."""
    shutil.copytree(LAB_DIR, tmp_path / "labs" / "tiled_matmul")
    shutil.copytree(ROOT / "reference" / "tiled_matmul", tmp_path / "reference" / "tiled_matmul")
    shutil.copytree(
        ROOT / "student_template" / "labs" / "tiled_matmul", tmp_path / "student_template" / "labs" / "tiled_matmul"
    )
    path = tmp_path / "labs" / "tiled_matmul" / "lab.yaml"
    assert load_lab(path).id == "tiled_matmul"  # the untouched copy is valid
    return path


def edit(path: Path, old: str, new: str) -> Path:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} must occur exactly once in the lab.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def spec_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_lab(path)
    err = info.value
    assert isinstance(err, GraderError)
    assert str(path) in str(err), "the message names the file"
    assert err.path == str(path)
    return err


def test_malformed_yaml_names_file_and_line(lab_copy):
    text = lab_copy.read_text(encoding="utf-8")
    line = text.splitlines().index("title: Tiled matrix multiplication") + 1
    edit(lab_copy, "title: Tiled matrix multiplication", "title: Tiled: matrix multiplication")
    err = spec_error(lab_copy)
    assert "malformed YAML" in str(err)
    assert f"line {line}," in str(err)
    assert "mapping values are not allowed" in str(err)


def test_top_level_must_be_a_mapping(lab_copy):
    lab_copy.write_text("- just\n- a list\n", encoding="utf-8")
    err = spec_error(lab_copy)
    assert "expected a mapping at the top level" in str(err)
    assert "list" in str(err)


def test_empty_yaml_is_not_a_mapping(lab_copy):
    lab_copy.write_text("# nothing here\n", encoding="utf-8")
    err = spec_error(lab_copy)
    assert "nothing (null)" in str(err)


def test_missing_yaml_file(tmp_path):
    err = spec_error(tmp_path / "lab.yaml")
    assert "file not found" in str(err)


def test_missing_required_key(lab_copy):
    text = lab_copy.read_text(encoding="utf-8")
    start = text.index("launcher:\n")
    end = text.index("# fp64 oracle")
    lab_copy.write_text(text[:start] + text[end:], encoding="utf-8")
    err = spec_error(lab_copy)
    assert err.key == "launcher"
    assert "launcher: missing required key" in str(err)


def test_missing_nested_required_key(lab_copy):
    edit(lab_copy, "{params: {width: 48}, seed: 12, points: 2}", "{params: {width: 48}, points: 2}")
    err = spec_error(lab_copy)
    assert err.key == "correctness.cases[1].seed"
    assert "correctness.cases[1].seed: missing required key" in str(err)


def test_wrong_type_names_key_and_value(lab_copy):
    edit(lab_copy, "seed: 11,", 'seed: "x",')
    err = spec_error(lab_copy)
    assert err.key == "correctness.cases[0].seed"
    assert "correctness.cases[0].seed: expected an integer" in str(err)
    assert "'x'" in str(err)


def test_bool_is_not_a_number(lab_copy):
    edit(lab_copy, "time_limit_s: 10", "time_limit_s: yes")
    err = spec_error(lab_copy)
    assert err.key == "correctness.time_limit_s"
    assert "expected a number" in str(err) and "True" in str(err)


def test_unknown_key_suggests_the_close_one(lab_copy):
    edit(lab_copy, "tolerance:\n", "tolerence:\n")
    err = spec_error(lab_copy)
    assert err.key == "tolerence"
    assert "unknown key" in str(err)
    assert "did you mean 'tolerance'" in str(err)


def test_unknown_nested_key_suggests_the_close_one(lab_copy):
    edit(lab_copy, "reduction_length: width", "reduction_lenght: width")
    err = spec_error(lab_copy)
    assert err.key == "tolerance.reduction_lenght"
    assert "did you mean 'reduction_length'" in str(err)


def test_unknown_key_without_near_match_lists_known_keys(lab_copy):
    edit(lab_copy, "title: Tiled matrix multiplication", "title: Tiled matrix multiplication\nzzzzzz: 1")
    err = spec_error(lab_copy)
    assert err.key == "zzzzzz"
    assert "known keys:" in str(err) and "launcher" in str(err)


def test_bad_literal_lists_the_choices(lab_copy):
    edit(lab_copy, "{name: M, role: input,", "{name: M, role: inptu,")
    err = spec_error(lab_copy)
    assert err.key == "launcher.args[0].role"
    assert "must be one of 'input', 'output', 'scalar'" in str(err)
    assert "'inptu'" in str(err)


def test_missing_file_path(lab_copy):
    edit(lab_copy, "header: interface.h", "header: nope.h")
    err = spec_error(lab_copy)
    assert err.key == "files.header"
    assert "files.header: file not found: 'nope.h'" in str(err)


def test_unknown_baseline_suggests_the_close_one(lab_copy):
    edit(lab_copy, "baseline: naive\n      full: 1.3", "baseline: naiv\n      full: 1.3")
    err = spec_error(lab_copy)
    assert err.key == "benchmark.checks[0].baseline"
    assert "unknown baseline 'naiv'" in str(err)
    assert "did you mean 'naive'" in str(err)


def test_full_below_zero(lab_copy):
    edit(lab_copy, "full: 1.3\n      zero: 1.05", "full: 1.0\n      zero: 1.05")
    err = spec_error(lab_copy)
    assert err.key == "benchmark.checks[0]"
    assert "'full' (1.0) must not be below 'zero' (1.05)" in str(err)


def test_negative_points(lab_copy):
    edit(lab_copy, "zero: 0.75\n      points: 2", "zero: 0.75\n      points: -2")
    err = spec_error(lab_copy)
    assert err.key == "benchmark.checks[1].points"
    assert "must not be negative" in str(err)


def test_unknown_parameter_in_a_shape(lab_copy):
    edit(lab_copy, "{name: N, role: input, dtype: float32, shape: [width, width]}",
         "{name: N, role: input, dtype: float32, shape: [width, widht]}")
    err = spec_error(lab_copy)
    assert err.key == "correctness.cases[0].params"
    assert "unknown parameter 'widht'" in str(err)
    assert "launcher argument 'N'" in str(err)


def test_unsafe_expression_in_a_shape(lab_copy):
    edit(lab_copy, "{name: N, role: input, dtype: float32, shape: [width, width]}",
         "{name: N, role: input, dtype: float32, shape: [width, \"__import__('os')\"]}")
    err = spec_error(lab_copy)
    assert err.key == "launcher.args[1].shape"
    assert "only + - * / // % ** and parameter names are allowed" in str(err)


def test_unknown_parameter_in_benchmark_flops(lab_copy):
    edit(lab_copy, "flops: 2 * width * width * width", "flops: 2 * n * n * n")
    err = spec_error(lab_copy)
    assert err.key == "benchmark.flops"
    assert "unknown parameter 'n'" in str(err)


def test_duplicate_case(lab_copy):
    edit(lab_copy, "    - {params: {width: 1024}, seed: 15, points: 2}\n",
         "    - {params: {width: 1024}, seed: 15, points: 2}\n    - {params: {width: 16}, seed: 99, points: 1}\n")
    err = spec_error(lab_copy)
    assert err.key == "correctness.cases[5]"
    assert "duplicate case 'width=16'" in str(err)


def test_duplicate_check_id(lab_copy):
    edit(lab_copy, "- id: speed_vs_reference", "- id: shared_memory_tiles")
    err = spec_error(lab_copy)
    assert err.key == "benchmark.checks[1].id"
    assert "duplicate check id 'shared_memory_tiles'" in str(err)


def test_scalar_without_value(lab_copy):
    edit(lab_copy, "{name: width, role: scalar, ctype: int, value: width}", "{name: width, role: scalar, ctype: int}")
    err = spec_error(lab_copy)
    assert err.key == "launcher.args[3]"
    assert "needs 'ctype' and 'value'" in str(err)


def test_launcher_needs_an_output(lab_copy):
    edit(lab_copy, "{name: P, role: output,", "{name: P, role: input,")
    err = spec_error(lab_copy)
    assert err.key == "launcher.args"
    assert "at least one argument with role 'output'" in str(err)


def test_non_utf8_yaml(lab_copy):
    lab_copy.write_bytes(b"id: tiled_matmul\ntitle: \xff\xfe\n")
    err = spec_error(lab_copy)
    assert "not UTF-8" in str(err)


# ------------------------------------------------------------------ expected verdicts


@pytest.fixture(scope="module")
def expected():
    return load_expected(LAB_DIR / "solutions" / "expected.yaml")


def test_expected_solutions_load(expected):
    by_name = {s.file.name: s for s in expected.solutions}
    assert {"reference.cu", "student.cu", "tiled32.cu", "naive.cu", "missing_sync.cu", "wrong_prototype.cu"} <= set(by_name)
    ref = by_name["reference.cu"]
    assert ref.file == (ROOT / "reference" / "tiled_matmul" / "reference.cu").resolve()
    assert ref.min_score == 24.0 and ref.max_score is None
    assert by_name["student.cu"].max_score == 0.0
    for sol in expected.solutions:
        assert sol.file.is_file(), sol.file
        assert sol.why
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.why = "x"  # type: ignore[misc]


def test_expected_verdicts_of_the_real_file(expected):
    by_name = {s.file.name: s for s in expected.solutions}
    naive = by_name["naive.cu"]
    assert naive.verdict("compile") == "pass"
    assert naive.verdict("correctness[width=16]") == "pass"
    assert naive.verdict("correctness[width=1024]") == "pass"
    assert naive.verdict("shared_memory_tiles") == "fail"
    assert naive.verdict("speedup_vs_naive") == "fail"

    race = by_name["missing_sync.cu"]
    assert race.verdict("correctness[width=112]") == "pass"
    assert race.verdict("correctness[width=512]") == "fail"

    tiled32 = by_name["tiled32.cu"]
    assert tiled32.verdict("speed_vs_reference") == "pass"
    assert tiled32.verdict("global_load_reduction") == "pass"

    assert by_name["wrong_prototype.cu"].verdict("compile") == "error"
    assert by_name["infinite_loop.cu"].verdict("correctness[width=48]") == "error"


def _sol(verdicts: dict) -> ExpectedSolution:
    return ExpectedSolution(file=Path("x.cu"), why="test", verdicts=verdicts)


def test_verdict_star_matches_brackets():
    sol = _sol({"correctness[*]": "error", "*": "fail"})
    assert sol.verdict("correctness[width=16]") == "error"
    assert sol.verdict("correctness[]") == "error"
    assert sol.verdict("compile") == "fail"
    # the pattern must match the whole id
    assert _sol({"correctness[*]": "error"}).verdict("xcorrectness[width=16]") is None
    assert _sol({"correctness[*]": "error"}).verdict("correctness[width=16]x") is None


def test_verdict_brackets_are_literal():
    sol = _sol({"correctness[width=16]": "pass"})
    assert sol.verdict("correctness[width=16]") == "pass"
    # as an fnmatch character class "[width=16]" would match the single character "w"
    assert sol.verdict("correctnessw") is None
    assert sol.verdict("correctness[width=160]") is None
    # other regex characters are literal as well
    assert _sol({"a.b": "pass"}).verdict("axb") is None
    assert _sol({"a+": "pass"}).verdict("aa") is None
    assert _sol({"a?": "pass"}).verdict("a") is None


def test_verdict_first_match_wins():
    assert _sol({"compile": "pass", "*": "fail"}).verdict("compile") == "pass"
    assert _sol({"*": "fail", "compile": "pass"}).verdict("compile") == "fail"
    sol = _sol({"correctness[width=16]": "pass", "correctness[*]": "error", "*": "fail"})
    assert sol.verdict("correctness[width=16]") == "pass"
    assert sol.verdict("correctness[width=48]") == "error"
    assert sol.verdict("speed") == "fail"


def test_verdict_none_when_nothing_matches():
    sol = _sol({"compile": "pass", "correctness[*]": "fail"})
    assert sol.verdict("shared_memory_tiles") is None
    assert _sol({}).verdict("compile") is None


def test_expected_bad_verdict_value(tmp_path):
    path = tmp_path / "expected.yaml"
    (tmp_path / "a.cu").write_text("// x\n")
    path.write_text("solutions:\n  - file: a.cu\n    why: w\n    verdicts: {compile: passed}\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_expected(path)
    assert str(path) in str(info.value)
    assert info.value.key == "solutions[0].verdicts.compile"
    assert "must be one of 'pass', 'fail', 'error', 'skipped', 'any'" in str(info.value)


def test_expected_missing_solution_file(tmp_path):
    path = tmp_path / "expected.yaml"
    path.write_text("solutions:\n  - file: gone.cu\n    why: w\n    verdicts: {'*': pass}\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_expected(path)
    assert str(path) in str(info.value)
    assert "solutions[0].file: file not found: 'gone.cu'" in str(info.value)


# ------------------------------------------------------------------ expressions


def test_expr_evaluate():
    assert expr.evaluate("2 * width * width * width", {"width": 3}) == 54
    assert expr.evaluate("3 * 4 * width * width", {"width": 2}) == 48
    assert expr.evaluate("(a + b) // 2", {"a": 3, "b": 4}) == 3
    assert expr.evaluate("a / 2", {"a": 3}) == 1.5
    assert expr.evaluate("a % 4 + a ** 2", {"a": 7}) == 52
    assert expr.evaluate("-a + +1", {"a": 5}) == -4
    assert expr.evaluate("16", {}) == 16
    assert expr.evaluate(7, {}) == 7
    assert expr.evaluate(2.5, {}) == 2.5


def test_expr_names():
    assert expr.names("2 * width * width") == {"width"}
    assert expr.names("(a + b) * c - 1") == {"a", "b", "c"}
    assert expr.names("42") == set()


def test_expr_unknown_parameter_lists_known():
    with pytest.raises(expr.ExprError) as info:
        expr.evaluate("widht * 2", {"width": 1, "height": 2})
    assert "unknown parameter 'widht'" in str(info.value)
    assert "height, width" in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "__import__('os').system('true')",
        "width.bit_length()",
        "width.real",
        "().__class__",
        "[1, 2]",
        "lambda: 1",
        "a if a else b",
        "a < b",
        "f(a)",
        "a[0]",
    ],
)
def test_expr_rejects_anything_but_arithmetic(text):
    with pytest.raises(expr.ExprError):
        expr.names(text)
    with pytest.raises(expr.ExprError):
        expr.evaluate(text, {"a": 1, "b": 2, "width": 3, "f": 4})


def test_expr_rejects_string_constants_and_syntax_errors():
    with pytest.raises(expr.ExprError, match="only numbers"):
        expr.evaluate("'abc'", {})
    with pytest.raises(expr.ExprError, match="not an arithmetic expression"):
        expr.evaluate("1 +", {})
    assert issubclass(expr.ExprError, ValueError)


# ------------------------------------------------------------------ keys of the later labs


def test_every_lab_in_the_repo_loads():
    from grader.labspec.labs import find_lab, lab_ids

    ids = lab_ids()
    assert {"tiled_matmul", "memory_types"} <= set(ids)
    for lab_id in ids:
        spec = find_lab(lab_id)
        assert spec.id == lab_id
        assert spec.task.strip(), f"{lab_id}: the README needs the task text"
        assert spec.max_points > 0


def test_repeat_and_text_parameters(lab_copy):
    edit(lab_copy, "{params: {width: 16}, seed: 11, points: 2}",
         "{params: {width: 16, layout: skewed}, seed: 11, points: 2, repeat: 3}")
    case = load_lab(lab_copy).correctness.cases[0]
    assert case.repeat == 3
    assert dict(case.params) == {"width": 16, "layout": "skewed"}
    assert case.label == "width=16,layout=skewed"


def test_repeat_must_be_positive(lab_copy):
    edit(lab_copy, "{params: {width: 16}, seed: 11, points: 2}", "{params: {width: 16}, seed: 11, points: 2, repeat: 0}")
    err = spec_error(lab_copy)
    assert err.key == "correctness.cases[0].repeat" and "at least 1" in str(err)


def test_text_parameter_used_as_a_size(lab_copy):
    edit(lab_copy, "{params: {width: 16}, seed: 11, points: 2}", "{params: {width: sixteen}, seed: 11, points: 2}")
    err = spec_error(lab_copy)
    assert err.key == "correctness.cases[0].params"
    assert "parameter 'width' is text ('sixteen'), not a number" in str(err)


SANITIZER = "\nsanitizers:\n  - {id: memcheck_clean, tool: memcheck, params: {width: 16}, seed: 5, points: 2}\n"


def _with_sanitizers(lab_copy, section):
    """The lab file with its own sanitizers section replaced by ``section``."""
    text = re.sub(r"\nsanitizers:\n(?:(?:  .*|#.*)?\n)*", "\n", lab_copy.read_text())
    assert "sanitizers:" not in text
    return text + section


def test_sanitizer_checks_load_and_count_points(lab_copy):
    lab_copy.write_text(_with_sanitizers(lab_copy, ""))
    before = load_lab(lab_copy).max_points
    lab_copy.write_text(_with_sanitizers(lab_copy, SANITIZER))
    spec = load_lab(lab_copy)
    (check,) = spec.sanitizers
    assert (check.id, check.tool, dict(check.params), check.points) == ("memcheck_clean", "memcheck", {"width": 16}, 2)
    assert spec.max_points == before + 2


def test_unknown_sanitizer_tool(lab_copy):
    lab_copy.write_text(_with_sanitizers(lab_copy, SANITIZER.replace("tool: memcheck", "tool: memchek")))
    err = spec_error(lab_copy)
    assert err.key == "sanitizers[0].tool" and "'memcheck'" in str(err) and "memchek" in str(err)


def test_sanitizer_case_needs_the_launcher_parameters(lab_copy):
    lab_copy.write_text(_with_sanitizers(lab_copy, SANITIZER.replace("{width: 16}", "{n: 16}")))
    err = spec_error(lab_copy)
    assert err.key == "sanitizers[0].params" and "unknown parameter 'width'" in str(err)


AT_MOST = """
  - id: sectors
    kind: at_most
    metric: l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
    per: l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
    what: global load sectors per request
    params: {width: 512}
    seed: 32
    full: 5
    zero: 9
    points: 1
"""


def test_at_most_counter_without_a_baseline(lab_copy):
    lab_copy.write_text(lab_copy.read_text() + AT_MOST)
    check = load_lab(lab_copy).counters[1]
    assert check.kind == "at_most" and check.baseline == ""
    assert check.metric_names == ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")


def test_at_most_bound_must_have_full_below_zero(lab_copy):
    lab_copy.write_text(lab_copy.read_text() + AT_MOST.replace("full: 5", "full: 12"))
    err = spec_error(lab_copy)
    assert err.key == "counters[1]" and "'full' (12.0) at or below 'zero' (9.0)" in str(err)


def test_reduction_counter_needs_a_baseline(lab_copy):
    lab_copy.write_text(lab_copy.read_text() + AT_MOST.replace("kind: at_most", "kind: reduction").replace("full: 5", "full: 12"))
    err = spec_error(lab_copy)
    assert err.key == "counters[1].baseline" and "name one" in str(err)


def test_metric_sums_and_bad_metric_names(lab_copy):
    lab_copy.write_text(lab_copy.read_text() + AT_MOST.replace(
        "per: l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "per: a.sum + b.sum"))
    assert load_lab(lab_copy).counters[1].metric_names[1:] == ("a.sum", "b.sum")
    lab_copy.write_text(lab_copy.read_text().replace("per: a.sum + b.sum", "per: a.sum / b.sum"))
    err = spec_error(lab_copy)
    assert err.key == "counters[1].per" and "not an Nsight Compute metric name: 'a.sum / b.sum'" in str(err)


@pytest.mark.parametrize("old,new,key,problem", [
    ("{params: {width: 16}, seed: 11, points: 2}", "{params: {width: 16}, seed: 11, points: -2}",
     "correctness.cases[0].points", "points must not be negative, got -2"),
    ("  time_limit_s: 10", "  time_limit_s: -10", "correctness.time_limit_s", "time_limit_s must not be negative, got -10"),
    ("  time_limit_s: 10", "  time_limit_s: 0", "correctness.time_limit_s", "must be more than 0, got 0"),
    ("  rtol: 1.0e-5", "  rtol: -1.0e-5", "tolerance.rtol", "rtol must not be negative, got -1e-05"),
    ("  rtol: 1.0e-5", "  rtol: .nan", "tolerance.rtol", "must be a finite number, got nan"),
    ("{params: {width: 16}, seed: 11, points: 2}", "{params: {width: 16}, seed: -11, points: 2}",
     "correctness.cases[0].seed", "seed must not be negative, got -11"),
])
def test_a_number_out_of_range_is_refused_with_its_key_and_value(lab_copy, old, new, key, problem):
    edit(lab_copy, old, new)
    err = spec_error(lab_copy)
    assert err.key == key and problem in str(err), str(err)


def test_a_misspelt_case_parameter_is_named_as_the_case_spells_it(lab_copy):
    edit(lab_copy, "{params: {width: 16}, seed: 11, points: 2}", "{params: {widht: 16}, seed: 11, points: 2}")
    err = spec_error(lab_copy)
    assert err.key == "correctness.cases[0].params.widht"
    assert "unknown parameter 'widht'; did you mean 'width'? (the launcher's arguments use: width)" in str(err), str(err)
