"""The command line: parses arguments and calls the library.

Exit codes:
  0  grading finished (whatever the score), unless --fail-under was given and missed
  1  the score is below --fail-under; `validate`: a verdict differs; `readme --check`: a README is stale;
     `diff`: a student's score or verdicts changed
  2  bad input: unknown lab, no labs found, missing or unreadable file, malformed lab.yaml, bad option;
     `grade-class`/`merge --export`: a grade is not final (checks did not run) and --allow-partial was not given
  3  internal error in the grader (a short id points to the full trace in the log)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from . import completion
from .cachedirs import default_cache_dir
from .classroom import stopping
from .classroom.collect import ROSTER, collect, first_run_late, load_entries, load_state, parse_time
from .classroom.progress import make as class_display
from .classroom.roster import from_folder as roster_folder
from .classroom.roster import load as load_roster
from .classroom.run import MAX_PER_GPU, ClassOptions, class_sandbox, grade_class
from .classroom.shard import parse as parse_shard
from .cliparser import parser as _parser
from .context import LabsSearch, RunContext, current, entered
from .course import readme
from .course import release as releasing
from .course.validate import render as render_validation
from .course.validate import validate
from .engine.grade import grade
from .engine.identity import file_hashes, identify, single_file_hash
from .engine.repo import grade_repo, repo_labs, submission_rel
from .errors import GraderError, internal_error_id, internal_error_log, report_thread_errors
from .gradebook import diff as class_diff
from .gradebook import lms
from .gradebook.grades import grades_of_record, read_manifest
from .gradebook.late import LatePolicy, load_policy
from .gradebook.merge import merge as merge_shards
from .gradebook.records import StudentRecord, sandbox_note, student_folder
from .gradebook.summary import terminal_lines
from .host.hostdirs import output_dir, private_dir
from .host.hostlock import lock_place
from .host.safeio import regular_file, write_whole
from .isolation import gitinfo
from .isolation.options import GradeOptions, Progress
from .labspec import labdoc
from .labspec.labs import find_lab, lab_ids
from .labspec.paths import BUNDLE_LABS, course_labs, labs_dir, locate_labs, refuse_unclaimed, shown
from .outcome import fmt_points
from .report import publish, text
from .textutil import clean, clean_line, neutralize_commands, plural

EXIT_OK, EXIT_BELOW, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def _options(args: argparse.Namespace) -> GradeOptions:
    # host state another user could have prepared is refused here, before any grading starts
    private_dir(args.cache_dir or default_cache_dir(), "the grader's cache folder")
    _output_folders(args)
    if not args.no_gpu:
        lock_place("")
    return GradeOptions(
        archs=tuple(_arch(a) for a in args.arch) if args.arch else None,
        cache_dir=args.cache_dir,
        timing=not args.no_timing,
        counters=not args.no_counters,
        counter_source=args.counter_source,
        sanitizers=not args.no_sanitizers,
        reuse_tool_runs=not args.rerun_tools,
        gpu=not args.no_gpu,
        keep_work=args.keep_work,
        sandbox=not args.no_sandbox,
        submission_limit_s=args.time_limit,
    )


def _output_folders(args: argparse.Namespace) -> None:
    """Every folder the command writes into, made private where missing or refused (another user's,
    or one they could write) before any grading starts."""
    if getattr(args, "out", None) is not None:
        output_dir(args.out, "the --out folder")
    publish.Outputs(getattr(args, "junit", None), getattr(args, "json", None), getattr(args, "markdown", None)).check()
    if args.keep_work is not None:
        output_dir(args.keep_work, "the --keep-work folder")


def _say(message: str) -> None:
    """A message for the user on stderr: no control characters, no workflow command."""
    print(neutralize_commands(clean(message)), file=sys.stderr, flush=True)


def _progress(args: argparse.Namespace) -> Progress:
    return (lambda msg: None) if args.quiet else (lambda msg: _say(clean_line(msg)))


def _fail_under(value: str, max_score: float) -> float:
    try:
        if value.endswith("%"):
            return float(value[:-1]) / 100 * max_score
        return float(value)
    except ValueError:
        raise GraderError(f"--fail-under: expected a number of points or a percentage, got {value!r}") from None


def _arch(value: str) -> str:
    v = value.strip().lower().replace("compute_", "sm_")
    if not v.startswith("sm_"):
        v = "sm_" + v.replace(".", "")
    if not v[3:].rstrip("af").isdigit():
        raise GraderError(f"--arch: expected something like sm_90, got {value!r}")
    return v


def cmd_grade(args: argparse.Namespace) -> int:
    refuse_unclaimed("grade")
    spec = find_lab(args.lab)
    if args.source is not None and args.stub:
        raise GraderError("give either a source file or --stub, not both")
    source = args.source or (spec.files.stub if args.stub else spec.files.reference)
    if source is None:
        raise GraderError(f"a student bundle has no reference solution to grade: give your file, e.g. "
                          f"`cuda-grader grade {spec.id} labs/{spec.id}/student.cu`", path=spec.source)
    # a path given on the command line: a mistyped one, a FIFO or a device is the user's input error
    regular_file(source, "a submitted source file")
    _say_bundle(args)
    if args.fail_under is not None:
        _fail_under(args.fail_under, spec.max_points)  # reject a bad value before the work
    options = _options(args)
    display = shown(source)
    who = identify([spec], {display: single_file_hash(source)}, options)
    progress = _progress(args)
    return _finish(publish.grade_then_write(who, lambda: [grade(spec, source, options, progress, display_name=display)], options,
                                            _outputs(args)), args)


def cmd_grade_repo(args: argparse.Namespace) -> int:
    if args.fail_under is not None:
        _fail_under(args.fail_under, 1.0)
    refuse_unclaimed("grade-repo")
    if args.repo.is_dir():
        _say_bundle(args)
    options = _options(args)
    specs = repo_labs(args.repo, args.labs)
    problem = gitinfo.repository_problem(args.repo)
    if problem:  # the work tree is still graded: git is not run on its history
        _say(f"note: the report records no commit: {problem}")
    who = identify(specs, file_hashes(args.repo, [submission_rel(s.id) for s in specs]), options,
                   repository=args.repo, commit=gitinfo.resolve(args.repo))
    progress = _progress(args)
    return _finish(publish.grade_then_write(who, lambda: grade_repo(args.repo, options, progress, labs=args.labs), options,
                                            _outputs(args)), args)


def _say_bundle(args: argparse.Namespace) -> None:
    """Where the labs come from, when it is a repository's own bundle: said even with -q, as every
    score line says it, since those are the student's files and the grade is feedback only."""
    found = locate_labs()
    if found.path is not None and found.from_repository:
        _say(f"labs: {shown(found.path)} (the repository's student bundle: feedback only, not the course's grade; "
             "its problem.py runs as you (--own-labs); checks that need the course's files are left to the course's "
             "runner; a course grades with --labs DIR)")


def _finish(done: publish.Graded, args: argparse.Namespace) -> int:
    reports = done.reports
    sys.stdout.write(text.terminal(reports, verbose=args.verbose, identity=done.identity))
    if args.fail_under is not None:
        score = sum(r.score for r in reports)
        need = _fail_under(args.fail_under, sum(r.max_score for r in reports))
        if score < need:
            print(f"score {fmt_points(score)} is below --fail-under {args.fail_under}", file=sys.stderr)
            return EXIT_BELOW
    return EXIT_OK


def cmd_grade_class(args: argparse.Namespace) -> int:
    if (args.class_dir is None) == (args.roster is None):
        raise GraderError("grade-class: give either a folder of student repositories or --roster CSV (one of them)")
    if args.jobs is not None and args.jobs < 1:
        raise GraderError(f"--jobs: expected a positive number, got {args.jobs}")
    if not 1 <= args.per_gpu <= MAX_PER_GPU:
        raise GraderError(f"--per-gpu: expected a number of students from 1 to {MAX_PER_GPU}, got {args.per_gpu}")
    course_labs("grade-class")  # before anything is read: a repository's own lab files never grade a class
    class_sandbox(GradeOptions(sandbox=not args.no_sandbox))  # no sandbox, no class: before --out is made
    stopping.install()  # Ctrl-C, SIGTERM, SIGHUP: students in flight are not published
    asked = _export_args(args)
    roster = load_roster(args.roster) if args.roster else roster_folder(args.class_dir)
    shard = parse_shard(args.shard) if args.shard else None
    chosen = shard.select([s.id for s in roster]) if shard else {s.id for s in roster}
    # a mapping that cannot be read, or that misses a student, stops the run before anything is graded
    exports = lms.targets(asked, [s.id for s in roster if s.id in chosen])
    cls = ClassOptions(args.out, tuple(find_lab(lab).id for lab in args.labs or ()), args.force, shard, args.gpus, args.jobs,
                       args.gradescope_visibility, args.health_wait, args.per_gpu, final_only=bool(exports) and not args.allow_partial)
    try:
        run = grade_class(roster, _options(args), cls, class_display(args.quiet))
    except KeyboardInterrupt:  # (a stopping signal: the run ends within its grace, whatever it then waits for)
        kept = sum((student_folder(args.out, sid) / "report.json").is_file() for sid in chosen)
        print(f"stopped: {kept} of {plural(len(chosen), 'student')} have their results in {args.out}/students (those being "
              "graded were not kept); run the same command again to grade the rest and write grades.csv, summary.md and "
              "the dashboard", file=sys.stderr)
        return 130
    print(f"graded {plural(len(run.graded), 'student')}, kept {len(run.skipped)} already graded: {args.out}/grades.csv, "
          f"{args.out}/summary.md, one folder per student in {args.out}/students")
    _write_exports(exports, args, args.out, list(run.rows), troubles=True)
    _say_unsandboxed(run.rows)
    return EXIT_OK


def _say_unsandboxed(rows: Sequence[StudentRecord]) -> None:
    note = sandbox_note(rows)
    if note:
        print(neutralize_commands(clean_line(f"NOT SANDBOXED: {note}")))


def _export_args(args: argparse.Namespace) -> list[lms.Asked]:
    return lms.asked(args.export or [], args.lms_map or [], args.lms_key or [])


def _write_exports(exports: list[lms.Target], args: argparse.Namespace, out: Path, rows: list[StudentRecord],
                   troubles: bool = False) -> None:
    """The students whose grading hit an error (with ``troubles``), the class's grades of record in
    a few lines, then each LMS file (a refusal: exit 2)."""
    manifest = read_manifest(out)
    grades = grades_of_record(manifest, rows)
    for r, g in zip(rows, grades):
        if troubles and r.problems and g.status not in ("not_due", "not_handed_in"):  # those are said below
            print(neutralize_commands(clean_line(f"  {r.student}: {'; '.join(r.problems)}"))[:300])
    for line in terminal_lines(grades):
        print(neutralize_commands(clean_line(line))[:300])
    for line in lms.write_all(exports, out, manifest.labs, grades, args.allow_partial):
        print(neutralize_commands(clean_line(line))[:300])


def cmd_merge(args: argparse.Namespace) -> int:
    asked = _export_args(args)
    exports = lms.targets(asked, list(read_manifest(args.shards[0]).roster) if asked else [])
    rows = merge_shards(args.shards, args.out)
    print(f"merged {len(args.shards)} shards: {len(rows)} students in {args.out}/grades.csv and {args.out}/summary.md")
    _say_unsandboxed(rows)
    _write_exports(exports, args, args.out, rows)
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    changes = class_diff.diff(args.old, args.new)
    sys.stdout.write(neutralize_commands(class_diff.render(changes, args.old, args.new)))
    return EXIT_BELOW if changes else EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    refuse_unclaimed("validate")
    specs = [find_lab(lab_id) for lab_id in (args.labs or lab_ids())]
    ok = True
    for spec in specs:
        results = validate(spec, _options(args), _progress(args))
        sys.stdout.write(render_validation(spec, results))
        ok = ok and all(r.ok for r in results)
    return EXIT_OK if ok else EXIT_BELOW


def cmd_readme(args: argparse.Namespace) -> int:
    """Each lab's README and the lab.yaml reference page, written (or with --check, compared)."""
    pages = [(path, readme.render(spec)) for spec in map(find_lab, args.labs or lab_ids()) for path in readme.targets(spec)]
    if not args.labs:
        pages.append((labdoc.target(), labdoc.render()))
    stale = []
    for path, page in pages:
        if path.exists() and path.read_text(encoding="utf-8") == page:
            continue
        if args.check:
            stale.append(path)
        else:
            write_whole(path, page)
            print(f"wrote {shown(path)}")
    for path in stale:
        print(f"{shown(path)} is out of date: run `cuda-grader readme`", file=sys.stderr)
    return EXIT_BELOW if stale else EXIT_OK


def _outputs(args: argparse.Namespace) -> publish.Outputs:
    """Where ``grade`` and ``grade-repo`` write their reports: each file asked for, the rest in --out."""
    out = args.out
    folder = publish.Outputs.folder(out) if out else publish.Outputs()
    return publish.Outputs(args.junit or folder.junit, args.json or folder.json, args.markdown or folder.markdown, folder.html,
                           step_summary=os.environ.get("GITHUB_STEP_SUMMARY") or None)


def cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion.script(_parser(), args.shell))
    return EXIT_OK


def cmd_labs(_: argparse.Namespace) -> int:
    ids = lab_ids()
    found = locate_labs()
    _say(f"labs in {shown(found.path) if found.path else '?'} ({found.how})")
    for lab_id in ids:
        spec = find_lab(lab_id)
        note = "" if spec.has_course_files else " [student bundle]"
        print(f"{lab_id:<18} {spec.title} ({fmt_points(spec.max_points)} points){note}")
    return EXIT_OK


def cmd_release(args: argparse.Namespace) -> int:
    if (args.grader_wheel is None) != (args.grader_url is None) or (args.grader_wheel is not None and args.course):
        raise GraderError("release: --grader-wheel and --grader-url go together, and only with a student repository")
    pin = releasing.wheel_pin(args.grader_wheel, args.grader_url) if args.grader_wheel is not None else ""
    written = releasing.release(labs_dir(), args.out, course=args.course, pin=pin)
    what = ("the course bundle: grade with `--labs " + str(args.out / "labs") + "`" if args.course
            else f"a student repository, its labs bundled in {BUNDLE_LABS}")
    print(f"wrote {len(written)} files to {shown(args.out)}: {what}")
    return EXIT_OK


def cmd_check_lab(args: argparse.Namespace) -> int:
    spec = find_lab(args.lab)
    print(f"{spec.source}: ok ({len(spec.correctness.cases)} correctness cases, {fmt_points(spec.max_points)} points)")
    return EXIT_OK


def cmd_collect(args: argparse.Namespace) -> int:
    deadline = parse_time(args.deadline, "--deadline")
    policy = load_policy(args.late_policy) if args.late_policy else LatePolicy()
    entries = load_entries(args.roster, deadline)
    late_start = first_run_late(load_state(args.into) if args.into.is_dir() else {}, deadline, policy)
    if late_start:
        _say(f"warning: {late_start}")
    started = time.monotonic()
    rows = collect(entries, args.into, policy, progress=_progress(args), allow_local=args.allow_local)
    took = time.monotonic() - started
    done = sum(1 for r in rows if r.commit)
    print(f"collected {done} of {plural(len(rows), 'student')} in {took:.1f} s into {args.into}: grade them with "
          f"`cuda-grader grade-class --roster {args.into / ROSTER} --out RESULTS`")
    for r in rows:
        if r.problem or r.flags:
            print(f"  {r.student}: {r.problem or 'flagged: ' + r.flags}")
    late = [f"{r.student} ({plural(int(r.late_days), 'day')}, {float(r.penalty):.0%} off)" for r in rows
            if r.late_days.isdigit() and int(r.late_days) > 0]
    if late:
        print(f"late: {', '.join(late)}")
    if late_start:
        _say(f"warning: {late_start}")
    return EXIT_OK


def _run_context(args: argparse.Namespace) -> RunContext:
    """The command's run: its labs as the options say, a graded repository's bundle looked for
    before the current folder's (the folder of ``grade``'s source file, ``grade-repo``'s repository)."""
    graded = args.repo if args.command == "grade-repo" else None
    if args.command == "grade" and args.source is not None:
        graded = args.source.parent
    return dataclasses.replace(current(), labs=LabsSearch(chosen=args.labs_dir, repo=graded, own=args.own_labs))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {
        "grade": cmd_grade, "grade-repo": cmd_grade_repo, "grade-class": cmd_grade_class, "merge": cmd_merge,
        "diff": cmd_diff, "validate": cmd_validate, "readme": cmd_readme, "collect": cmd_collect,
        "labs": cmd_labs, "check-lab": cmd_check_lab, "completion": cmd_completion, "release": cmd_release,
    }[args.command]
    report_thread_errors()
    try:
        with entered(_run_context(args)):
            return handler(args)
    except GraderError as exc:
        _say(f"error: {exc}")
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        stopping.end_within(130)  # (what is left, its pools and children, must not keep it)
        return 130
    except BrokenPipeError:  # the reader went away (`cuda-grader labs | head -1`): not our bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return EXIT_OK
    except Exception as exc:  # anything else is our bug: short id here, full trace in the log
        log = internal_error_log()
        short = internal_error_id(exc, log)
        print(f"internal error {short}: {type(exc).__name__}: {exc} (full trace in {log})", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
