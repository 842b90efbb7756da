"""Lab specifications: typed, frozen records of lab.yaml and solutions/expected.yaml.

``specload`` builds them from YAML (every field is a key of the same name unless its metadata
says ``yaml: False``); ``labdoc`` renders each field's ``doc`` metadata as the lab.yaml
reference, labs/LAB_YAML.md. Paths in the YAML are relative to the YAML file's folder and stay
inside the lab (``specload.lab_bound``), and expressions (shapes, values, sizes) are arithmetic over the case parameters: numbers, parameter
names, ``+ - * / // % **`` and parentheses.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Optional

Role = Literal["input", "output", "scalar"]
DType = Literal["float32", "int32", "uint32", "uint8", "int64"]
CType = Literal["int", "long long", "float"]
StaticRequirement = Literal[
    "shared_memory", "constant_memory", "no_local_memory", "global_atomics", "shared_atomics", "atomics"
]
SanitizerTool = Literal["memcheck", "racecheck", "synccheck", "initcheck"]
CounterKind = Literal["reduction", "at_most"]
InputSource = Literal["generated", "filled"]
LineFigure = Literal["", "global_load_sectors", "global_load_requests", "shared_bank_conflicts", "global_atomics"]
ParamValue = typing.Union[int, str]
VerdictName = Literal["pass", "fail", "error", "skipped", "any"]

_PARAMS = ("The case: parameter name to value. Integers size the buffers (every parameter the launcher's shapes and "
           "values and `tolerance.reduction_length` use must be given); text values pick a variant of "
           "`problem.py`'s `generate()`.")
_CHECK_ID = "The check's id in reports and in expected.yaml verdicts; unique among the lab's checks and case labels."
_HINT = "Advice appended to the check's message when it does not get full points; empty: none."
_BASELINE = "`reference` (files.reference) or a name from `files.baselines`."
_COURSE_ONLY = ("The check needs a file that students never get (the reference solution, or a baseline only such "
                "checks use): `cuda-grader release` leaves those files out of the student bundle, and grading from "
                "that bundle skips the check with \"graded on the course's runner\" (its points still count in the "
                "maximum). Required when the score depends on the `reference` baseline.")


@dataclass(frozen=True)
class Arg:
    """One parameter of the student's launcher, in prototype order."""

    name: str = field(metadata={"doc": "The parameter's name in the launcher's prototype; also the array's key in "
                                       "what `problem.py`'s `generate()` returns and `expected()` gives."})
    role: Role = field(metadata={"doc": "`input`: an array from `generate()` that the call must leave unchanged; "
                                        "`output`: an array compared with `expected()`; `scalar`: a number "
                                        "passed by value."})
    dtype: Optional[DType] = field(default=None, metadata={"doc": "Arrays (required for them): the element type."})
    shape: tuple[str, ...] = field(default=(), metadata={
        "doc": "Arrays (required for them): the dimensions, each an expression over the case parameters; the "
               "launcher gets a flat buffer of their product elements."})
    init: Literal["nan", "zero"] = field(default="nan", metadata={
        "doc": "Outputs: their contents before each call. `nan`: NaN for float types, the largest value for "
               "integer types, so that elements never written show as wrong; `zero`: zeros (for outputs the "
               "kernel adds to)."})
    ctype: Optional[CType] = field(default=None, metadata={"doc": "Scalars (required for them): the C type."})
    value: str = field(default="", metadata={
        "doc": "Scalars (required for them): an expression over the case parameters (usually just a name)."})
    host: bool = field(default=False, metadata={
        "doc": "Inputs: pass a pointer to a host copy instead of a device pointer (for data the launcher copies "
               "itself, e.g. with `cudaMemcpyToSymbol`)."})


@dataclass(frozen=True)
class Launcher:
    """The host function the student implements and the grader calls (declared in files.header)."""

    name: str = field(metadata={"doc": "The launcher's C name, as the header declares it; a file that does not "
                                       "define it fails to compile with a message that says so."})
    args: tuple[Arg, ...] = field(metadata={"doc": "Its parameters, in prototype order; at least one output."})


@dataclass(frozen=True)
class Files:
    """The lab's files, each relative to lab.yaml's folder; each must be a regular file inside the lab."""

    header: Path = field(metadata={"doc": "The interface header: force-included when compiling the student's file "
                                          "and every baseline; the README quotes the launcher's declaration from it."})
    problem: Path = field(metadata={"doc": "The Python module with `generate(params, seed, xp)` (the inputs) and "
                                           "`expected(inputs, params)` (the float64 or exact oracle)."})
    stub: Path = field(metadata={"doc": "The file students start from (the student template); the lab README is "
                                        "written next to it too."})
    reference: Optional[Path] = field(default=None, metadata={
        "doc": "The reference solution: the baseline named `reference`, and a solution expected to score full "
               "marks. Left out only in a student bundle (what `cuda-grader release` writes), which grades without "
               "the checks marked `course_only`."})
    baselines: Mapping[str, Path] = field(default_factory=dict, metadata={
        "doc": "More kernels that speed and counter checks compare with: name to .cu file. Left out: only "
               "`reference`. A student bundle has those that some check not marked `course_only` needs."})

@dataclass(frozen=True)
class Tolerance:
    """``|got - expected| <= sqrt(k) * (atol + rtol * |expected|)``, k the reduction length."""

    kind: Literal["float", "exact"] = field(default="float", metadata={
        "doc": "`float`: compared in float64 within the bound above (NaN and infinity are always wrong); "
               "`exact`: compared as integers."})
    rtol: float = field(default=0.0, metadata={"doc": "Relative tolerance per term, a fraction of |expected| "
                                                      "(`float` only)."})
    atol: float = field(default=0.0, metadata={"doc": "Absolute tolerance per term, in output units "
                                                      "(`float` only)."})
    reduction_length: str = field(default="1", metadata={
        "doc": "k, the number of terms summed into each output: an expression over the case parameters "
               "(values below 1 count as 1). The bound grows with sqrt(k)."})


@dataclass(frozen=True)
class StaticCheck:
    """A requirement on the compiled code (SASS and resource usage), checked without a GPU."""

    id: str = field(metadata={"doc": _CHECK_ID})
    require: StaticRequirement = field(metadata={
        "doc": "What the compiled kernels must show: `shared_memory` (LDS/STS), `constant_memory` (reads of "
               "`__constant__` data), `no_local_memory` (no LDL/STL, no spills), `global_atomics` (RED/ATOMG), "
               "`shared_atomics` (ATOMS), `atomics` (either)."})
    points: float = field(metadata={"doc": "Points for passing."})
    hint: str = field(default="", metadata={"doc": _HINT})
    after_correctness: bool = field(default=False, metadata={
        "doc": "Score it only when every correctness case passes (for requirements an empty stub meets, such "
               "as `no_local_memory`)."})


@dataclass(frozen=True)
class Case:
    """One graded input. Integer parameters size the buffers; text ones pick a generator variant."""

    params: Mapping[str, ParamValue] = field(metadata={"doc": _PARAMS})
    seed: int = field(metadata={"doc": "The generator's seed, mixed with the grading run's secret (random unless "
                                       "`GRADER_SECRET` is set), so that outputs cannot be precomputed."})
    points: float = field(metadata={"doc": "Points for a correct result."})
    name: str = field(default="", metadata={
        "doc": "The case's label, as in the check id `correctness[<label>]`; empty: the parameters, "
               "`k=v,k=v`. Labels must be unique."})
    repeat: int = field(default=1, metadata={
        "doc": "Run the same input this many times with fresh outputs; every run must be right (catches "
               "races). At least 1."})

    @property
    def label(self) -> str:
        return self.name or params_label(self.params)


def params_label(params: Mapping[str, ParamValue]) -> str:
    """How reports name a case: ``m=17,n=33,k=9``."""
    return ",".join(f"{k}={v}" for k, v in params.items())


@dataclass(frozen=True)
class Correctness:
    """The graded inputs and how each is run."""

    cases: tuple[Case, ...] = field(metadata={"doc": "The cases, in the order they run; at least one."})
    time_limit_s: float = field(default=10.0, metadata={
        "doc": "Seconds one run of a case may take before it is stopped (and the case errors)."})
    guard_elements: int = field(default=64, metadata={
        "doc": "Canary elements (of the output's type) before and after every output buffer; a changed canary "
               "fails the case as a write out of bounds."})
    max_mismatches_shown: int = field(default=5, metadata={
        "doc": "How many wrong elements a failed case lists in its details."})


@dataclass(frozen=True)
class Timing:
    """When sampling stops. Kernels are timed in turns, one call each, with CUDA events."""

    min_samples: int = field(default=10, metadata={
        "doc": "Timed calls each kernel needs before sampling may stop (after 4 x budget_s, 3 will do)."})
    max_samples: int = field(default=100, metadata={"doc": "Sampling stops once every kernel has this many calls."})
    target_rse: float = field(default=0.005, metadata={
        "doc": "Sampling stops early once every kernel's relative standard error of the mean is at most this "
               "(a fraction: 0.005 is 0.5%)."})
    budget_s: float = field(default=2.0, metadata={"doc": "Seconds of sampling after which it stops, once "
                                                          "min_samples are in."})
    warmup_s: float = field(default=0.025, metadata={
        "doc": "Seconds each kernel is called before sampling, its times discarded (at least one call)."})
    max_cv: float = field(default=0.02, metadata={
        "doc": "Largest coefficient of variation (stdev / mean, a fraction) accepted; above it every kernel is "
               "sampled once more, and a kernel still above is reported as noisy. A first pass whose samples "
               "are already too spread for max_samples of them to come under it is sampled again at once. "
               "Set it above what the lab's kernels vary by on an idle GPU."})


@dataclass(frozen=True)
class SpeedCheck:
    """Credit on baseline_time / student_time: none at or below ``zero``, full at ``full``."""

    id: str = field(metadata={"doc": _CHECK_ID})
    baseline: str = field(metadata={"doc": "The kernel timed beside the student's: " + _BASELINE})
    full: float = field(metadata={"doc": "Speed ratio (baseline median / student median, x) at or above which the "
                                         "check gets full points; at least `zero`."})
    zero: float = field(metadata={"doc": "Speed ratio at or below which it gets none; linear in between."})
    points: float = field(metadata={"doc": "Points at full credit."})
    hint: str = field(default="", metadata={"doc": _HINT})
    course_only: bool = field(default=False, metadata={"doc": _COURSE_ONLY})


@dataclass(frozen=True)
class Benchmark:
    """The timed case: the student's launcher against the baselines, once every correctness case passes."""

    params: Mapping[str, ParamValue] = field(metadata={"doc": _PARAMS})
    seed: int = field(default=0, metadata={"doc": "The generator's seed, mixed with the grading run's secret like "
                                                  "a case's."})
    flops: str = field(default="0", metadata={
        "doc": "Floating-point operations per call, an expression over the parameters, for the GFLOP/s in "
               "reports; 0: not reported."})
    bytes: str = field(default="0", metadata={
        "doc": "Bytes per call that must move to or from DRAM, an expression over the parameters: GB/s in "
               "reports, and a median faster than bytes / peak DRAM bandwidth is an error. 0: neither."})
    time_limit_s: float = field(default=120.0, metadata={"doc": "Seconds any one step of the timing (setting up "
                                                                "the case, one call of a kernel) may take."})
    timing: Timing = field(default_factory=Timing, metadata={"doc": "When sampling stops."})
    checks: tuple[SpeedCheck, ...] = field(default=(), metadata={"doc": "The speed checks on this case."})


@dataclass(frozen=True)
class CounterCheck:
    """A hardware-counter figure, ``scale * metric`` (divided by ``per`` when given), each a sum of metrics.

    ``reduction``: credit on baseline_value / student_value (full at >= full, none at <= zero).
    ``at_most``: an absolute bound on the student's value (full at <= full, none at >= zero); the
    baseline, if named, is profiled too and shown for comparison.
    """

    id: str = field(metadata={"doc": _CHECK_ID})
    metric: str = field(metadata={"doc": "The Nsight Compute metric, or several joined with `+` (summed), "
                                         "collected over the student's kernels in one launch."})
    what: str = field(metadata={"doc": "What the figure counts, in words (messages and the README)."})
    params: Mapping[str, ParamValue] = field(metadata={"doc": _PARAMS})
    seed: int = field(metadata={"doc": "The generator's seed, used as is; checks with the same params and seed "
                                       "share one profiler run."})
    full: float = field(metadata={"doc": "`reduction`: the ratio (x fewer than the baseline) at or above which "
                                         "the check gets full points; `at_most`: the value at or below which it "
                                         "does."})
    zero: float = field(metadata={"doc": "`reduction`: the ratio at or below which it gets none; `at_most`: the "
                                         "value at or above which it gets none. Linear in between."})
    points: float = field(metadata={"doc": "Points at full credit."})
    kind: CounterKind = field(default="reduction", metadata={
        "doc": "`reduction`: credit on baseline value / student value; `at_most`: a bound on the student's "
               "value (`full` at or below `zero`)."})
    per: str = field(default="", metadata={"doc": "A metric (or `+` sum) to divide by, for a per-request or "
                                                  "per-instruction figure; empty: no division."})
    scale: float = field(default=1.0, metadata={"doc": "A factor the figure is multiplied by, e.g. 32 to turn "
                                                       "sectors per requested byte into sectors per 32 bytes requested."})
    baseline: str = field(default="", metadata={
        "doc": "The kernel profiled for comparison: " + _BASELINE + " Required for `reduction`; empty: none. For "
               "`at_most` it is only shown beside the student's value: a student bundle without it leaves it out."})
    hint: str = field(default="", metadata={"doc": _HINT})
    by_line: LineFigure = field(default="", metadata={
        "doc": "Where the check fails, name the student's source lines its figure comes from (at most three, "
               "worst first), from a second profiler run with the source counters: `global_load_sectors` "
               "(sectors per 32 bytes requested, as the check counts them), `global_load_requests`, "
               "`shared_bank_conflicts` (extra wavefronts per shared-memory instruction) or `global_atomics`; "
               "empty: none."})
    time_limit_s: float = field(default=120.0, metadata={"doc": "Seconds one profiler run (the student's or the "
                                                                "baseline's) may take."})
    inputs: InputSource = field(default="generated", metadata={
        "doc": "`generated`: the lab's generator makes the profiled case's inputs from `seed`; `filled`: the "
               "worker fills them itself (small floats, integers 0) and no input file is written (for a large case "
               "whose figure does not depend on the values, such as DRAM bytes)."})
    course_only: bool = field(default=False, metadata={"doc": _COURSE_ONLY})

    @property
    def metric_names(self) -> tuple[str, ...]:
        return split_metrics(self.metric) + split_metrics(self.per)


def scored_on_baseline(check: "SpeedCheck | CounterCheck") -> bool:
    """Whether a check's score depends on its baseline (an ``at_most`` bound only shows it beside)."""
    return bool(check.baseline) and getattr(check, "kind", "reduction") == "reduction"


def split_metrics(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split("+") if part.strip())


@dataclass(frozen=True)
class SanitizerCheck:
    """One launch on a tiny case under compute-sanitizer; any reported error fails it."""

    id: str = field(metadata={"doc": _CHECK_ID})
    tool: SanitizerTool = field(metadata={
        "doc": "The compute-sanitizer tool: `memcheck` (out-of-bounds and misaligned accesses), `racecheck` "
               "(shared-memory races), `synccheck` (barrier misuse), `initcheck` (reads of uninitialised "
               "global memory)."})
    params: Mapping[str, ParamValue] = field(metadata={"doc": _PARAMS + " Keep it small: the tools are slow."})
    seed: int = field(metadata={"doc": "The generator's seed, used as is."})
    points: float = field(metadata={"doc": "Points for a clean run, once every correctness case passes; not "
                                           "negative."})
    hint: str = field(default="", metadata={"doc": _HINT})
    time_limit_s: float = field(default=120.0, metadata={"doc": "Seconds the run under the tool may take."})


@dataclass(frozen=True)
class CompileOptions:
    """How the student's file and the baselines are compiled."""

    flags: tuple[str, ...] = field(default=("-O3",), metadata={
        "doc": "nvcc flags, before the grader's own (architectures, `-shared`, `-lineinfo`, ...)."})
    time_limit_s: float = field(default=60.0, metadata={
        "doc": "Seconds one compilation may take; a real lab file takes seconds, a template bomb is stopped."})


@dataclass(frozen=True)
class LabSpec:
    """A lab: ``labs/<id>/lab.yaml``."""

    id: str = field(metadata={"doc": "The lab's id, the same as its folder's name: the student's file is "
                                     "`labs/<id>/student.cu`, and reports name the lab by it."})
    title: str = field(metadata={"doc": "The title of the README and of reports."})
    files: Files = field(metadata={"doc": "The lab's files."})
    launcher: Launcher = field(metadata={"doc": "The function students implement."})
    tolerance: Tolerance = field(metadata={"doc": "How outputs are compared with the oracle's."})
    correctness: Correctness = field(metadata={"doc": "The graded cases."})
    task: str = field(default="", metadata={
        "doc": "The task for students, Markdown: the README's \"The task\" section (the rest of the README is "
               "generated around it)."})
    static: tuple[StaticCheck, ...] = field(default=(), metadata={"doc": "Checks on the compiled code."})
    sanitizers: tuple[SanitizerCheck, ...] = field(default=(), metadata={"doc": "compute-sanitizer checks."})
    benchmark: Optional[Benchmark] = field(default=None, metadata={"doc": "The timed case; left out: no speed checks."})
    counters: tuple[CounterCheck, ...] = field(default=(), metadata={"doc": "Hardware-counter checks (Nsight "
                                                                             "Compute)."})
    compile: CompileOptions = field(default_factory=CompileOptions, metadata={"doc": "Compiler options."})
    root: Path = field(default=Path("."), metadata={"yaml": False})  # set by the loader: lab.yaml's folder
    source: Path = field(default=Path("lab.yaml"), metadata={"yaml": False})  # set by the loader: lab.yaml

    @property
    def max_points(self) -> float:
        return (
            sum(c.points for c in self.static)
            + sum(c.points for c in self.correctness.cases)
            + sum(c.points for c in self.sanitizers)
            + (sum(c.points for c in self.benchmark.checks) if self.benchmark else 0)
            + sum(c.points for c in self.counters)
        )

    @property
    def has_course_files(self) -> bool:
        """False for a student bundle: no reference solution, and the course-only checks skipped."""
        return self.files.reference is not None

    @property
    def baseline_names(self) -> tuple[str, ...]:
        """The baselines whose files are here: ``reference`` (unless a student bundle) and ``files.baselines``."""
        return (("reference",) if self.files.reference is not None else ()) + tuple(self.files.baselines)

    def baseline_source(self, name: str) -> Path:
        if name == "reference":
            if self.files.reference is None:
                raise KeyError("a student bundle has no reference solution")
            return self.files.reference
        return self.files.baselines[name]


@dataclass(frozen=True)
class ExpectedSolution:
    """A known solution and the verdict each check must give it (glob patterns, first match wins)."""

    file: Path = field(metadata={"doc": "The solution's .cu file, relative to expected.yaml's folder."})
    why: str = field(metadata={"doc": "What it does and why it earns these verdicts; the README lists those "
                                      "under `solutions/wrong/` as common failures."})
    verdicts: Mapping[str, VerdictName] = field(metadata={
        "doc": "Check-id pattern to verdict; `*` is the only wildcard (ids contain brackets) and the first "
               "matching pattern wins. Every check needs one; `any` accepts every verdict."})
    min_score: Optional[float] = field(default=None, metadata={
        "doc": "The lowest total score allowed, in points; left out: no bound. Checked only when every check ran "
               "on the grading machine."})
    max_score: Optional[float] = field(default=None, metadata={
        "doc": "The highest total score allowed, in points; left out: no bound. Checked likewise."})
    lines: Mapping[str, int] = field(default_factory=dict, metadata={
        "doc": "Check id to the line of this file the failing check must name first (its report location): a "
               "sanitizer finding, or a counter check's worst line (`by_line`). Checked where the check ran."})

    def verdict(self, check_id: str) -> str | None:
        """The expected verdict for a check; ``*`` is the only wildcard (ids contain brackets)."""
        for pattern, verdict in self.verdicts.items():
            regex = ".*".join(re.escape(part) for part in pattern.split("*"))
            if re.fullmatch(regex, check_id):
                return verdict
        return None


@dataclass(frozen=True)
class ExpectedSolutions:
    """A lab's known solutions: ``labs/<id>/solutions/expected.yaml``."""

    solutions: tuple[ExpectedSolution, ...] = field(metadata={
        "doc": "The known solutions; every .cu file under `solutions/correct` and `solutions/wrong`, the "
               "reference and the stub must be listed."})
