"""How a class run shows its progress: on a terminal, a live display (rich) with the class's bar,
its ETA and one line per lane (what each GPU or CPU lane is grading); elsewhere (a log, CI),
one plain line per student graded."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from ..outcome import fmt_points
from ..textutil import clean_line, neutralize_commands, plural
from .student import StudentResult

#: What a lane says between students (shown on the live display only).
IDLE = "idle"


class Display:
    """Plain lines (also the base of the live display): one per student graded, and what a lane
    says of itself outside any student's grading (readying its GPU)."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.total = self.done_count = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        if not self.quiet:
            print(neutralize_commands(clean_line(message)), file=self.stream, flush=True)

    def begin(self, total: int, skipped: int, lanes: list[str]) -> None:
        self.total, self.started = total, time.monotonic()
        if skipped:
            self.say(f"{skipped} students already graded with the same files, labs and grader: skipped (--force regrades them)")
        self.say(f"grading {total} students on {len(lanes)} lanes ({', '.join(lanes)})" if total else "nothing to grade")

    def lane(self, lane: str, student: str, text: str) -> None:
        if not student and text != IDLE:
            self.say(f"{lane}: {text}")

    def finished(self, result: StudentResult) -> None:
        with self._lock:
            self.done_count += 1
            k = self.done_count
        elapsed = time.monotonic() - self.started
        eta = elapsed / k * (self.total - k)
        trouble = f", {plural(len(result.problems), 'problem')}" if result.problems else ""
        self.say(f"[{k}/{self.total}] {result.student}: {fmt_points(result.score)}/{fmt_points(result.max_score)} "
                 f"in {result.seconds:.1f} s on {result.lane or 'cpu'}{trouble} (ETA {eta:.0f} s)")

    def close(self) -> None:
        pass


class LiveDisplay(Display):
    """rich's live progress: the class's bar with ETA, and one line per lane."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), console=Console(file=stream), transient=False)
        self.lanes: dict[str, Any] = {}
        self.task: Any = None

    def begin(self, total: int, skipped: int, lanes: list[str]) -> None:
        super().begin(total, skipped, lanes)
        self.task = self.progress.add_task("class", total=total)
        for name in lanes:
            self.lanes[name] = self.progress.add_task(f"  {name}: idle", total=None, start=False)
        self.progress.start()

    def say(self, message: str) -> None:
        if getattr(self, "task", None) is not None:
            self.progress.console.print(neutralize_commands(clean_line(message)), markup=False, highlight=False)
        else:
            super().say(message)

    def lane(self, lane: str, student: str, text: str) -> None:
        if lane in self.lanes:
            line = clean_line(f"  {lane}: {student} {text}")[:110]
            self.progress.update(self.lanes[lane], description=line.replace("[", "\\["))

    def finished(self, result: StudentResult) -> None:
        super().finished(result)
        self.progress.advance(self.task)

    def close(self) -> None:
        for task in self.lanes.values():
            self.progress.update(task, visible=False)
        self.progress.stop()


def make(quiet: bool, stream: TextIO | None = None) -> Display:
    """The live display on a terminal (when rich is installed), plain lines otherwise."""
    stream = stream or sys.stderr
    if not quiet and hasattr(stream, "isatty") and stream.isatty():
        try:
            return LiveDisplay(stream)
        except ImportError:
            pass
    return Display(stream, quiet)
