"""How a class run shows its progress: on a terminal, a live display (rich) with the class's bar,
its ETA and one line per lane (what each GPU or CPU lane is grading); elsewhere (a log, CI),
one plain line per student graded, and a line for a student still being graded after a minute
(what their lane did last). Either way every lane's every step goes, with the seconds since
the run began, to the class's ``lanes.log`` (``Display.keep_log``): where a slow student's time went.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from ..context import carried
from ..host.safeio import appending
from ..outcome import fmt_points
from ..textutil import clean_line, neutralize_commands, plural
from .student import StudentResult

#: What a lane says between students (shown on the live display only).
IDLE = "idle"
#: The class folder's log of every lane's steps.
LANES_LOG = "lanes.log"
#: Between a log line's seconds and the rest (lane, student, step: two spaces apart).
LOG_SEP = " s  "
#: The log stops growing past this size (a line says so).
LOG_LIMIT_BYTES = 32 << 20
#: A student graded longer than this gets a line on the plain display, and again as often.
STILL_S = 60.0


def read_log(path: Path) -> list[tuple[float, str, str, str]]:
    """The steps ``Display.keep_log`` wrote to ``path``: (seconds, lane, student, step), "-" for
    none; its other lines (where it stops) skipped, and nothing where there is no log."""
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else ():
        seconds, _, rest = line.partition(LOG_SEP)
        fields = rest.split("  ", 2)
        try:
            if len(fields) == 3:
                out.append((float(seconds), fields[0], fields[1], fields[2]))
        except ValueError:
            pass
    return out


class Display:
    """Plain lines (also the base of the live display): one per student graded, and what a lane
    says of itself outside any student's grading (readying its GPU)."""

    #: Whether the display shows each lane's current step itself (then it needs no "still grading" lines).
    shows_lanes = False

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.total = self.done_count = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._log: TextIO | None = None
        self._logged, self._log_started = 0, 0.0
        self._busy: dict[str, tuple[str, str, float, float]] = {}  # lane: student, last step, started, last noted
        self._ticker: threading.Event | None = None

    def keep_log(self, path: Path) -> None:
        """Append every lane's steps to ``path`` from now on (until ``close``)."""
        self._log, self._log_started = appending(path), time.monotonic()
        self._logged = os.fstat(self._log.fileno()).st_size
        self._write_log("", "", f"run started at {time.strftime('%Y-%m-%d %H:%M:%S')}")

    def _write_log(self, lane: str, student: str, text: str) -> None:
        with self._lock:
            if self._log is None or self._logged > LOG_LIMIT_BYTES:
                return
            line = clean_line(f"{time.monotonic() - self._log_started:9.1f}{LOG_SEP}{lane or '-'}  {student or '-'}  {text}")[:400] + "\n"
            full = self._logged + len(line) > LOG_LIMIT_BYTES
            if full:
                line = f"(the log stops here: it reached {LOG_LIMIT_BYTES >> 20} MiB)\n"
            self._logged = LOG_LIMIT_BYTES + 1 if full else self._logged + len(line)  # (that line once)
            self._log.write(line)
            self._log.flush()

    def _note(self, lane: str, student: str, text: str) -> None:
        """What every display does with a lane's step: the log, and the lane's last step."""
        self._write_log(lane, student, text)
        now = time.monotonic()
        with self._lock:
            if not student or text == IDLE:
                self._busy.pop(lane, None)
            else:
                kept = self._busy.get(lane)
                started, noted = (kept[2], kept[3]) if kept and kept[0] == student else (now, now)
                self._busy[lane] = (student, text, started, noted)

    def still(self, now: float | None = None) -> list[str]:
        """Lines for the students graded longer than ``STILL_S`` and not mentioned for as long."""
        now = time.monotonic() if now is None else now
        out = []
        with self._lock:
            for lane, (student, text, started, noted) in sorted(self._busy.items()):
                if now - noted >= STILL_S:
                    self._busy[lane] = (student, text, started, now)
                    out.append(f"{lane}: still grading {student} after {now - started:.0f} s; last: {text}")
        return out

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(STILL_S / 6):
            for line in self.still():
                self.say(line)

    def say(self, message: str, always: bool = False) -> None:
        if always or not self.quiet:
            print(neutralize_commands(clean_line(message)), file=self.stream, flush=True)

    def warn(self, message: str) -> None:
        """A line the run shows even with -q, and keeps in the class's log."""
        self._write_log("", "", message)
        self.say(message, always=True)

    def begin(self, total: int, skipped: int, lanes: list[str]) -> None:
        self.total, self.started = total, time.monotonic()
        if skipped:
            self.say(f"{skipped} students already graded with the same files, labs and grader: skipped (--force regrades them)")
        self.say(f"grading {total} students on {len(lanes)} lanes ({', '.join(lanes)})" if total else "nothing to grade")
        if total and not self.quiet and not self.shows_lanes:
            self._ticker = threading.Event()
            threading.Thread(target=carried(self._tick), args=(self._ticker,), name="class-still", daemon=True).start()

    def lane(self, lane: str, student: str, text: str) -> None:
        self._note(lane, student, text)
        if not student and text != IDLE:
            self.say(f"{lane}: {text}")

    def finished(self, result: StudentResult) -> None:
        with self._lock:
            self.done_count += 1
            k = self.done_count
        elapsed = time.monotonic() - self.started
        eta = elapsed / k * (self.total - k)
        trouble = f", {plural(len(result.problems), 'problem')}" if result.problems else ""
        line = (f"[{k}/{self.total}] {result.student}: {fmt_points(result.score)}/{fmt_points(result.max_score)} "
                f"in {result.seconds:.1f} s on {result.lane or 'cpu'}{trouble} (ETA {eta:.0f} s)")
        self._write_log(result.lane or "cpu", result.student, line)
        self.say(line)

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.set()
        self.end_log()

    def end_log(self) -> None:
        with self._lock:
            log, self._log = self._log, None
        if log is not None:
            log.close()


class LiveDisplay(Display):
    """rich's live progress: the class's bar with ETA, and one line per lane."""

    shows_lanes = True

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

    def say(self, message: str, always: bool = False) -> None:
        if getattr(self, "task", None) is not None:
            self.progress.console.print(neutralize_commands(clean_line(message)), markup=False, highlight=False)
        else:
            super().say(message, always)

    def lane(self, lane: str, student: str, text: str) -> None:
        self._note(lane, student, text)
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
        super().close()


def make(quiet: bool, stream: TextIO | None = None) -> Display:
    """The live display on a terminal (when rich is installed), plain lines otherwise."""
    stream = stream or sys.stderr
    if not quiet and hasattr(stream, "isatty") and stream.isatty():
        try:
            return LiveDisplay(stream)
        except ImportError:
            pass
    return Display(stream, quiet)
