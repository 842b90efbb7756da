"""``dashboard.html``: the class on one self-contained page, its content read back from the HTML,
and rendered, sorted and clicked in a real headless browser where one is installed: a class
collected from local bare repositories with a fixed clock (on time, late with a penalty and a
flag, not due yet, nothing handed in, an error)."""

from __future__ import annotations

import base64
import csv
import datetime
import hashlib
import html.parser
import json
import re
import shutil
from pathlib import Path

import headless
import pytest

from grader import cli
from grader.classroom.collect import ROSTER, collect
from grader.gradebook import dashboard
from grader.gradebook.grades import Manifest
from grader.gradebook.records import LabScore, StudentRecord, Verdict
from grader.labspec.labs import find_lab
from grader.textutil import HTML_CSP

LABS = ({"id": "tiled_matmul", "title": "Tiled", "max_points": 4, "version": "v"},
        {"id": "histogram", "title": "Histogram", "max_points": 2, "version": "v"})
HOSTILE = "<script>alert(1)</script> & \x1b[31mred"


def _v(lab: str, check: str, outcome: str, points: float, message: str = "") -> Verdict:
    return Verdict(lab, check, outcome, points, 2, message)


def _records() -> list[StudentRecord]:
    gpu = "NVIDIA H100 80GB HBM3"
    alice = StudentRecord("alice", (LabScore("tiled_matmul", 4, 4), LabScore("histogram", 2, 2)),
                          (_v("tiled_matmul", "compile", "pass", 0), _v("tiled_matmul", "correctness[a]", "pass", 2),
                           _v("tiled_matmul", "speed", "pass", 2), _v("histogram", "compile", "pass", 0),
                           _v("histogram", "correctness[b]", "pass", 2)), gpu=gpu)
    bob = StudentRecord("bob", (LabScore("tiled_matmul", 2, 4), LabScore("histogram", 0, 2)),
                        (_v("tiled_matmul", "compile", "pass", 0), _v("tiled_matmul", "correctness[a]", "pass", 2),
                         _v("tiled_matmul", "speed", "fail", 0, "0.5x the speed of the naive kernel"),
                         _v("histogram", "compile", "error", 0, "labs/histogram/student.cu not found: the lab's file must be there"),
                         _v("histogram", "correctness[b]", "fail", 0, "not graded: no submission")), gpu=gpu)
    eve = StudentRecord("eve", (LabScore("tiled_matmul", 0, 4), LabScore("histogram", 0, 2)),
                        (_v("tiled_matmul", "compile", "error", 0, f"compile error: {HOSTILE}"),
                         _v("tiled_matmul", "correctness[a]", "fail", 0, "not graded"),
                         _v("tiled_matmul", "speed", "fail", 0, "not graded"), _v("histogram", "compile", "pass", 0),
                         _v("histogram", "correctness[b]", "skipped", 0, "turned off")), gpu=gpu)
    return [alice, bob, eve]


class _Page(html.parser.HTMLParser):
    """The students' table (each row's own columns' text and check cells' outcomes, the check
    names of its headers), the links, the scripts and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.info: list[list[str]] = []
        self.headers: list[tuple[str, str]] = []  # (data-key, text) of each header that sorts
        self.sorted: dict[str, str] = {}  # data-key: aria-sort
        self.links: list[str] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.meta: dict[str, str] = {}
        self._in_table = self._in_body = self._in_script = False
        self._cell: list[str] | None = None
        self._header: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id") == "students":
            self._in_table = True
        elif tag == "tbody" and self._in_table:
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append([])
            self.info.append([])
        elif tag == "td" and self._in_body and (a.get("class") or "").startswith("c "):
            self.rows[-1].append((a.get("class") or "")[2:])
        elif tag == "td" and self._in_body:
            self._cell = []
        elif tag == "th" and self._in_table and a.get("data-key") is not None:
            self._header = [a.get("data-key") or ""]
            if a.get("aria-sort"):
                self.sorted[a.get("data-key") or ""] = a.get("aria-sort") or ""
        elif tag == "a":
            self.links.append(a.get("href") or "")
        elif tag == "meta" and a.get("http-equiv"):
            self.meta[a["http-equiv"] or ""] = a.get("content") or ""
        elif tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_table = self._in_body = False
        elif tag == "td" and self._cell is not None:
            self.info[-1].append(" ".join(" ".join(self._cell).split()))
            self._cell = None
        elif tag == "th" and self._header is not None:
            self.headers.append((self._header[0], "".join(self._header[1:]).strip()))
            self._header = None
        elif tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
            return
        self.text.append(data)
        for part in (self._cell, self._header):
            if part is not None:
                part.append(data)

    def student(self, sid: str) -> list[str]:
        """A student's own columns: student, status, score, late days, penalty, flags."""
        return next(row for row in self.info if row and row[0] == sid)

    def cells(self, sid: str) -> list[str]:
        return next(cells for row, cells in zip(self.info, self.rows) if row and row[0] == sid)

    @property
    def order(self) -> list[str]:
        return [row[0] for row in self.info if row]


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def test_the_page_holds_every_student_by_every_check_and_escapes_what_they_wrote():
    manifest = Manifest(LABS, ("alice", "bob", "eve"), ("alice", "bob", "eve"), None, {"version": "0.1.0", "source": "abcdef123456789"}, {})
    text = dashboard.render(manifest, _records(), {})
    page = _parse(text)
    cells = [r for r in page.rows if r]
    assert cells == [["pass"] * 5,
                     ["pass", "pass", "fail", "missing", "missing"],  # histogram not handed in: apart from the fails
                     ["error", "fail", "fail", "pass", "skipped"]]
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in text and "\x1b" not in text
    # one script, the page's own, and the policy lets that one run and nothing else
    assert page.scripts == [dashboard.SCRIPT] and text.count("<script") == 1
    digest = base64.b64encode(hashlib.sha256(page.scripts[0].encode()).digest()).decode()
    assert page.meta["Content-Security-Policy"] == dashboard.CSP == f"{HTML_CSP}; script-src 'sha256-{digest}'"
    assert "http://" not in text and "https://" not in text
    body = " ".join(page.text)
    assert "Graded on NVIDIA H100 80GB HBM3 by cuda-lab-grader 0.1.0 (sources abcdef123456)" in body
    assert "Students whose grading hit an error (2)" in body
    assert {"students/bob/report.html", "students/eve/report.json"} <= set(page.links)
    assert not [link for link in page.links if link.endswith(".md")]  # raw text in a browser
    assert "Not a final grade" not in body
    marked = dashboard.render(manifest, _records(), {"bob": ("gpu",)})
    assert "some checks did not run for 1 of 3 graded students" in marked


def _nothing(sid: str, message: str) -> StudentRecord:
    """A student with nothing graded: each lab's first check says why, the rest are not graded."""
    return StudentRecord(sid, (LabScore("tiled_matmul", 0, 4), LabScore("histogram", 0, 2)),
                         tuple(v for lab in ("tiled_matmul", "histogram")
                               for v in (_v(lab, "compile", "error", 0, message.format(lab=lab)),
                                         _v(lab, "speed", "fail", 0, "not graded: nothing to grade"))))


@pytest.mark.parametrize("record, status", [
    (_records()[0], "graded"),
    (_records()[1], "graded"),  # one lab of two not handed in: graded, that lab's cells apart
    (_nothing("carol", "collect: not collected yet (deadline 2026-12-06T23:59:00Z)"), "not due"),
    (_nothing("dave", "collect: the repository is empty (no commit on its default branch)"), "not handed in"),
    (_nothing("gone", "collect: repository not found (gone, renamed, or private to this account)"), "not handed in"),
    (_nothing("fresh", "the repository has no labs/ folder (expected labs/<lab>/student.cu)"), "not handed in"),
    (_nothing("nofile", "labs/{lab}/student.cu not found: the lab's file must be there"), "not handed in"),
    (_nothing("locked", "collect: access denied (private: give this account read access)"), "graded"),  # the TA's to fix
    (_nothing("crashed", "the lane on GPU 0 failed: RuntimeError: x"), "graded"),
    (StudentRecord("later", (), (), graded=False), "no results"),
])
def test_each_student_stands_where_their_record_puts_them(record, status):
    assert dashboard._status(record) == status


def test_students_not_due_or_with_nothing_handed_in_are_no_failures():
    rows = [_records()[0], _nothing("carol", "collect: not collected yet (deadline 2026-12-06T23:59:00Z)"),
            _nothing("dave", "collect: the repository is empty (no commit on its default branch)")]
    manifest = Manifest(LABS, ("alice", "carol", "dave"), ("alice", "carol", "dave"), None, {"version": "0.1.0"}, {})
    page = _parse(dashboard.render(manifest, rows, {}))
    body = " ".join(" ".join(page.text).split())
    assert [page.student(s)[1:3] for s in ("alice", "carol", "dave")] == [["graded", "6"], ["not due yet", "–"], ["not handed in", "–"]]
    assert set(page.cells("carol")) == {"notdue"} and set(page.cells("dave")) == {"missing"}
    assert "Students whose grading hit an error (0)" in body and "Students without work to grade (2)" in body
    assert "tiled_matmul (4 points, 1 handed in, 1 not due yet)" in body


DEADLINE = datetime.datetime(2026, 12, 1, 23, 59, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def collected_class(tmp_path_factory) -> Path:
    """A class collected from local bare repositories with a fixed clock and graded on CPU: alice
    on time; bob two days late with a commit dated before the deadline (a 20% penalty and a flag);
    carol with an extension not due yet; dave with an empty repository; eve, whose file does not
    define the launcher (an error of hers, which stays one)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    from test_collect import POLICY, Student, _entries

    base = tmp_path_factory.mktemp("collected")
    reference = find_lab("tiled_matmul").files.reference
    students = {sid: Student(base, sid) for sid in ("alice", "bob", "carol", "dave", "eve")}
    for sid, source in (("alice", reference), ("bob", None), ("carol", reference), ("eve", None)):
        students[sid].commit("first", DEADLINE - datetime.timedelta(days=1), source)
        students[sid].push()
    folder = base / "collected"
    entries = _entries(students, {"carol": "5"})
    collect(entries, folder, POLICY, now=DEADLINE, allow_local=True)
    students["bob"].commit("done, dated before the deadline", DEADLINE - datetime.timedelta(hours=2), reference)
    students["bob"].push()
    collect(entries, folder, POLICY, now=DEADLINE + datetime.timedelta(hours=36), allow_local=True)
    out = base / "results"
    assert cli.main(["grade-class", "--roster", str(folder / ROSTER), "--out", str(out), "--lab", "tiled_matmul", "--no-gpu", "-q"]) == 0
    return out


def _grades(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as fh:
        return {r["student"]: r for r in csv.DictReader(fh)}


def test_a_collected_class_shows_each_students_standing_score_late_days_penalty_and_flags(collected_class):
    page = _parse((collected_class / "dashboard.html").read_text())
    grades = _grades(collected_class)
    body = " ".join(" ".join(page.text).split())
    assert "5 students: 3 graded (1 late), 1 not due yet, 1 not handed in." in body
    assert [h for _, h in page.headers][:6] == ["Student", "Status", "Score (of 24)", "Late days", "Penalty", "Flags"]
    alice, bob, carol, dave, eve = (page.student(s) for s in ("alice", "bob", "carol", "dave", "eve"))
    # the class is collected from folders of this machine (--allow-local), which every row flags
    local = "collected from a folder of this machine"
    assert alice[1:5] == ["graded", grades["alice"]["total"], "0", ""] and alice[5].startswith(f"1 flag {local}")
    # bob: the score after the penalty, as grades.csv has it, with the raw score beside it
    assert float(grades["bob"]["total"]) == pytest.approx(0.8 * float(grades["bob"]["raw_total"])) and float(grades["bob"]["total"]) > 0
    assert bob[1:5] == ["graded", f"{grades['bob']['total']} ({grades['bob']['raw_total']} before the penalty)", "2", "20%"]
    # the local folder, the commit's date against its collection, and the on-time commit the late one replaced
    assert bob[5].startswith("3 flags") and local in bob[5] and "an on-time commit " in bob[5]
    assert "commit dated 2026-12-01T21:59:00Z, before the deadline, but first collected at" in bob[5]
    assert carol[1:6] == ["not due yet", "–", "", "", ""] and set(page.cells("carol")) == {"notdue"}
    assert dave[1:6] == ["not handed in", "–", "", "", ""] and set(page.cells("dave")) == {"missing"}
    assert eve[1:3] == ["graded", "0"] and page.cells("eve")[0] == "error"
    assert "Students whose grading hit an error (1)" in body and "Students without work to grade (2)" in body
    assert "carol not due yet tiled_matmul: collect: not collected yet (deadline 2026-12-06T23:59:00Z)" in body
    reports = [f"students/{sid}/report.html" for sid in ("alice", "bob", "carol", "dave", "eve")]
    assert set(reports) <= set(page.links) and not [link for link in page.links if link.endswith(".md")]
    assert all((collected_class / link).is_file() for link in reports)


def test_every_check_column_is_headed_by_the_checks_name(collected_class):
    page = _parse((collected_class / "dashboard.html").read_text())
    report = json.loads((collected_class / "students" / "alice" / "report.json").read_text())
    (lab,) = report["labs"]
    checks = [c["id"] for c in lab["checks"]]
    assert len(checks) > 10
    assert page.headers[6:] == [(f"tiled_matmul:{c}", c) for c in checks]
    assert all(len(cells) == len(checks) for cells in page.rows if cells)


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("dashboard")
    repos = base / "repos"
    for sid, source in (("alice", find_lab("tiled_matmul").files.reference), ("bob", None)):
        target = repos / sid / "labs" / "tiled_matmul" / "student.cu"
        target.parent.mkdir(parents=True)
        if source:
            shutil.copy(source, target)
        else:
            target.write_text("// does not compile\nvoid oops( {\n")
    out = base / "out"
    assert cli.main(["grade-class", str(repos), "--out", str(out), "--lab", "tiled_matmul", "--no-gpu", "-q"]) == 0
    return out


def test_grade_class_writes_the_dashboard_beside_the_summary(graded_class):
    page = _parse((graded_class / "dashboard.html").read_text())
    assert len([r for r in page.rows if r]) == 2
    assert "dashboard.html" in (graded_class / "summary.md").read_text()
    assert "Not a final grade" in " ".join(page.text)  # graded without a GPU


#: Colours the page paints (CSS), to be found in the browser's picture of it.
COLOURS = {"passed": (0x2E, 0x7D, 0x32), "failed": (0xE5, 0x39, 0x35), "error": (0x6A, 0x1B, 0x9A),
           "not due yet": (0xBB, 0xDE, 0xFB), "late row": (0xFF, 0xF8, 0xE1)}


@headless.needs_browser
def test_a_headless_browser_draws_the_class_and_sorts_it_as_the_address_asks(collected_class, tmp_path):
    url = (collected_class / "dashboard.html").as_uri()
    shot = headless.screenshot(url, tmp_path / "dashboard.png", tmp_path / "profile")
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
    image = pytest.importorskip("matplotlib.image").imread(tmp_path / "dashboard.png")
    assert image.shape[:2] == (1000, 1400)
    rgb = (image[..., :3] * 255).round().astype("uint32")
    painted = set((rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2]).ravel().tolist())
    assert {name for name, (r, g, b) in COLOURS.items() if r << 16 | g << 8 | b not in painted} == set()
    rendered = _parse(headless.dump_dom(url, tmp_path / "profile"))
    assert rendered.order == ["alice", "bob", "carol", "dave", "eve"] and rendered.sorted == {}
    assert [name for _, name in rendered.headers[6:]][:2] == ["compile", "shared_memory_tiles"]
    by_score = _parse(headless.dump_dom(url + "#sort=score-desc", tmp_path / "profile"))
    assert by_score.order == ["alice", "bob", "eve", "carol", "dave"] and by_score.sorted == {"score": "descending"}
    by_status = _parse(headless.dump_dom(url + "#sort=status-desc", tmp_path / "profile"))
    assert by_status.order == ["dave", "carol", "alice", "bob", "eve"]  # not handed in, not due yet, then graded


@headless.needs_browser
def test_a_click_on_a_header_sorts_the_students_and_the_address_keeps_it(collected_class, tmp_path):
    url = (collected_class / "dashboard.html").as_uri()
    order = "Array.prototype.map.call(document.querySelectorAll('#students tbody tr'), function (r) { return r.cells[0].textContent; })"
    with headless.Page(url, tmp_path / "profile") as page:
        page.click('th[data-key="score"]')
        assert page.evaluate(order) == ["carol", "dave", "eve", "bob", "alice"]
        assert page.evaluate("location.hash") == "#sort=score-asc"
        page.click('th[data-key="score"]')
        assert page.evaluate(order) == ["alice", "bob", "eve", "carol", "dave"]
        page.click('th[data-key="tiled_matmul:compile"]')  # a check's column: its errors first
        assert page.evaluate(order)[0] == "eve"
        assert page.evaluate("location.hash") == "#sort=tiled_matmul%3Acompile-asc"
        page.click('th[data-key="student"]')
        assert page.evaluate(order) == ["alice", "bob", "carol", "dave", "eve"]
    again = _parse(headless.dump_dom(url + "#sort=tiled_matmul%3Acompile-asc", tmp_path / "profile"))
    assert again.order[0] == "eve" and again.sorted == {"tiled_matmul:compile": "ascending"}


@headless.needs_browser
def test_no_script_but_the_pages_own_runs(collected_class, tmp_path):
    """Text that escaped its escaping still could not run: the policy names the page's script by its hash."""
    text = (collected_class / "dashboard.html").read_text()
    planted = text.replace("<body>", "<body><script>document.documentElement.setAttribute('data-pwned', '1')</script>"
                                     "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned', '2')\">", 1)
    page = tmp_path / "dashboard.html"
    page.write_text(planted)
    dom = headless.dump_dom(page.as_uri() + "#sort=score-desc", tmp_path / "profile")
    assert dom.count("data-pwned") == 2 and not re.search(r"<html[^>]*data-pwned", dom)  # planted, never run
    assert _parse(dom).sorted == {"score": "descending"}  # while the page's own script ran
