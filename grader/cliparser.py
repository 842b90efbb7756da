"""The command line's parser: every command, option and help text (``cli`` runs what it parses;
``completion`` writes the shell scripts from it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import __version__, completion
from .classroom.run import ClassOptions
from .gradebook import gradescope, lms
from .isolation.options import GradeOptions
from .labspec.paths import BUNDLE_LABS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cuda-grader",
        description="Grade CUDA lab submissions: correctness, speed and memory behaviour.",
        epilog="Exit codes: 0 graded, 1 below --fail-under, 2 bad input, 3 internal error.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _labs_option(p, None)
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="grade one .cu file for one lab")
    g.add_argument("lab", help="lab id (see `cuda-grader labs`)")
    g.add_argument("source", nargs="?", type=Path, help="the .cu file to grade (default: the lab's reference solution)")
    g.add_argument("--stub", action="store_true", help="grade the lab's student stub instead of the reference")
    _report_options(g)
    _grading_options(g)

    r = sub.add_parser("grade-repo", help="grade every lab of a student repository (labs/<lab>/student.cu): one report")
    r.add_argument("repo", nargs="?", type=Path, default=Path("."), help="the student repository (default: the current folder)")
    r.add_argument("--lab", action="append", dest="labs", metavar="LAB", help="grade only this lab (repeatable)")
    _report_options(r)
    _grading_options(r)

    c = sub.add_parser("collect", help="TAs: fetch every student's repository once their deadline has passed and record "
                                       "the commit found and when (the roster grade-class reads)",
                       epilog="Run it at the deadline and again at each extension's deadline (cron, a SLURM job, a "
                              "scheduled workflow: see the README); each run adds what changed to DIR/collected.json "
                              "and rewrites DIR/roster.csv.")
    c.add_argument("roster", type=Path, help="CSV of student,repository[,extension]: a URL or a path (relative to the CSV); "
                                             "an extension is the student's own deadline (ISO 8601) or days added to --deadline")
    c.add_argument("--deadline", required=True, metavar="TIME", help="the course's deadline, ISO 8601 with its offset "
                                                                     "(2026-12-01T23:59:00-05:00, or ...Z for UTC)")
    c.add_argument("--into", type=Path, required=True, metavar="DIR", help="where the clones, collected.json and roster.csv go")
    c.add_argument("--late-policy", type=Path, metavar="YAML", help="late_days, penalty_per_day (percent), grace_minutes, "
                                                                     "graded_commit (latest or best) (default: no late work accepted)")
    c.add_argument("--allow-local", action="store_true", help="also collect a repository given as a folder of this machine or "
                                                               "a file:// URL (refused by default; flagged in roster.csv)")
    c.add_argument("-q", "--quiet", action="store_true", help="no line per student")

    k = sub.add_parser("grade-class", help="TAs: grade a whole class (a folder of student repositories, or a roster CSV) "
                                           "into one results folder with grades.csv and summary.md")
    k.add_argument("class_dir", nargs="?", type=Path, help="a folder holding one repository per student (the folder's name is the student id)")
    k.add_argument("--roster", type=Path, help="a CSV of student,path[,commit] instead of a folder (paths relative to the CSV)")
    k.add_argument("--out", type=Path, required=True, help="the results folder (a rerun skips students already graded in it)")
    k.add_argument("--lab", action="append", dest="labs", metavar="LAB", help="grade only this lab (repeatable)")
    k.add_argument("--force", action="store_true", help="regrade every student, even those whose results are current")
    k.add_argument("--shard", metavar="I/N", help="grade only the I-th of N slices of the class (1 <= I <= N); merge them with `merge`")
    k.add_argument("--gpus", metavar="all|none|0,1", help="GPUs to grade on, numbered as CUDA_VISIBLE_DEVICES leaves them (default: all)")
    k.add_argument("-j", "--jobs", type=int, metavar="N", help="compile processes ahead of the GPUs, and CPU lanes without one (default: CPU count)")
    k.add_argument("--gradescope-visibility", choices=gradescope.VISIBILITIES, default="visible",
                   help="visibility of the tests in each results.json (default: %(default)s)")
    k.add_argument("--per-gpu", type=int, default=ClassOptions.per_gpu, metavar="N",
                   help="students graded at once on each GPU: their GPU work side by side, each timing alone (default: %(default)s)")
    k.add_argument("--health-wait", type=_seconds, default=ClassOptions.health_wait_s, metavar="SECONDS",
                   help="the longest a timing waits for a busy, hot or throttled GPU before going ahead marked noisy (default: %(default)g)")
    _export_options(k)
    _grading_options(k)

    mg = sub.add_parser("merge", help="TAs: combine the results folders of --shard runs into one (the files a single run writes)")
    mg.add_argument("shards", nargs="+", type=Path, metavar="SHARD_DIR", help="the results folder of each --shard run (every shard once)")
    mg.add_argument("--out", type=Path, required=True, help="the merged results folder")
    _export_options(mg)

    df = sub.add_parser("diff", help="TAs: list the students whose score or check verdicts changed between two class runs")
    df.add_argument("old", type=Path, metavar="OLD", help="the earlier class run's results folder")
    df.add_argument("new", type=Path, metavar="NEW", help="the later class run's results folder")

    v = sub.add_parser("validate", help="instructors: check that every known solution of a lab gets its expected verdicts")
    v.add_argument("labs", nargs="*", metavar="LAB", help="lab ids (default: every lab)")
    _grading_options(v)

    m = sub.add_parser("readme", help="write each lab's README from its lab.yaml and the lab.yaml reference (or --check that they are current)")
    m.add_argument("labs", nargs="*", metavar="LAB", help="lab ids (default: every lab)")
    m.add_argument("--check", action="store_true", help="write nothing; exit 1 if a README differs from its lab.yaml")

    sub.add_parser("labs", help="list the labs and say where they were found")
    c = sub.add_parser("check-lab", help="load a lab's YAML and report any error in it")
    c.add_argument("lab", help="lab id or path to lab.yaml")

    s = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)",
                       epilog='bash: eval "$(cuda-grader completion bash)" in ~/.bashrc; '
                              "zsh: cuda-grader completion zsh > ~/.zfunc/_cuda-grader with fpath+=(~/.zfunc) before compinit; "
                              "fish: cuda-grader completion fish > ~/.config/fish/completions/cuda-grader.fish")
    s.add_argument("shell", choices=completion.SHELLS, help="the shell to complete for")
    e = sub.add_parser("release", help="instructors: write the student repository (its labs bundled, without the course's "
                                       "answers), or with --course the bundle the course's runners grade with")
    e.add_argument("--out", type=Path, required=True, help="the folder to write (new, empty, or an earlier release)")
    e.add_argument("--course", action="store_true", help="the course bundle: every lab with its reference solution and "
                                                         "baselines, no known solutions (use it with --labs DIR/labs)")
    e.add_argument("--grader-wheel", type=Path, metavar="WHEEL", help="the grader's wheel the course publishes: the student "
                                                                      "repository's workflow and README pin it by --grader-url and its SHA-256")
    e.add_argument("--grader-url", metavar="URL", help="the https:// address WHEEL is published at (a GitHub release's asset)")
    for parser in sub.choices.values():
        _labs_option(parser, argparse.SUPPRESS)
    return p


def _export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--export", action="append", choices=lms.FORMATS, help="also write canvas.csv or moodle.csv, "
                   "files Canvas or Moodle import as they are, from final grades only (repeatable: one --lms-map each)")
    p.add_argument("--lms-map", action="append", type=Path, metavar="CSV", help="for each --export, in the same order: "
                   "canvas: the gradebook CSV exported from Canvas (with or without its SIS columns); moodle: a CSV of "
                   "student,<key> (the student ids of the results and their Moodle identifier)")
    p.add_argument("--lms-key", action="append", metavar="COLUMN", help="how students are matched: canvas 'SIS Login ID' "
                   "(default, where the export has it), 'SIS User ID', 'ID' or 'Integration ID'; moodle idnumber (default), "
                   "email or username (repeatable: one per format)")
    p.add_argument("--allow-partial", action="store_true", help="export even grades that are not final (checks that did not "
                   "run: no GPU, a lost lane), as canvas.partial.csv or moodle.partial.csv")


def _labs_option(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--labs", dest="labs_dir", type=Path, default=default, metavar="DIR",
                   help="take the labs from DIR (default: $GRADER_LABS_DIR, the course repository the grader runs "
                        f"from, or the repository's own bundle, {BUNDLE_LABS})")
    p.add_argument("--own-labs", action="store_true", default=default if default is argparse.SUPPRESS else False,
                   help=f"grade with this repository's own bundle ({BUNDLE_LABS}): its lab files are mine, run its "
                        "problem.py as me (feedback only; without --labs or this, a repository's bundle is refused)")


def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="write report.xml, report.json and report.md into this folder")
    p.add_argument("--junit", type=Path, help="write JUnit XML here")
    p.add_argument("--json", type=Path, help="write the JSON result here")
    p.add_argument("--markdown", type=Path, help="write the Markdown summary here")
    p.add_argument("--fail-under", metavar="SCORE", help="exit 1 if the score is below SCORE points (or SCORE%% of the maximum)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every check's details")


def _grading_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", action="append", metavar="sm_XY", help="compile for this arch (repeatable; default: the GPU's, or sm_90 without a GPU)")
    p.add_argument("--no-gpu", action="store_true", help="run only the checks that need no GPU")
    p.add_argument("--no-timing", action="store_true", help="skip the speed checks")
    p.add_argument("--no-counters", action="store_true", help="skip the hardware-counter checks")
    p.add_argument("--counters", choices=("replay", "ncu"), default="replay", dest="counter_source",
                   help="how the student's counters are read: replay (the default: the grader's CUPTI replayer of the "
                   "recorded launches, with no student host code in it; Nsight Compute for any case it cannot replay, "
                   "with the reason) or ncu (Nsight Compute for every case)")
    p.add_argument("--no-sanitizers", action="store_true", help="skip the compute-sanitizer checks")
    p.add_argument("--rerun-tools", action="store_true",
                   help="run the profiler and the sanitizers on every case again, even where a run of the same compiled code "
                   "was kept from an earlier grade")
    p.add_argument("--cache-dir", type=Path, help="build cache (default: $GRADER_CACHE_DIR, else $XDG_CACHE_HOME/cuda-lab-grader, "
                   "else ~/.cache/cuda-lab-grader)")
    p.add_argument("--keep-work", type=Path, help="keep the worker's files (inputs, outputs, logs) under this folder")
    p.add_argument("--no-sandbox", action="store_true", help="run compile and run steps outside bubblewrap even where it is installed")
    p.add_argument("--time-limit", type=_seconds, default=GradeOptions.submission_limit_s, metavar="SECONDS",
                   help="the most one submission's grading may take, per lab (default: %(default)g)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value
