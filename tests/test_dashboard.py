"""``dashboard.html``: the class on one self-contained page, its content read back from the HTML,
and rendered by a real headless browser where one is installed."""

from __future__ import annotations

import html.parser
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import cli
from grader.gradebook import dashboard
from grader.gradebook.grades import Manifest
from grader.gradebook.records import LabScore, StudentRecord, Verdict
from grader.labspec.labs import find_lab

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
    """The heat map's cells per student row, the links, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self.meta: dict[str, str] = {}
        self._in_heat = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("class") == "heat":
            self._in_heat = True
        elif tag == "tr" and self._in_heat:
            self.rows.append([])
        elif tag == "td" and self._in_heat and (a.get("class") or "").startswith("c "):
            self.rows[-1].append((a.get("class") or "")[2:])
        elif tag == "a":
            self.links.append(a.get("href") or "")
        elif tag == "meta" and a.get("http-equiv"):
            self.meta[a["http-equiv"] or ""] = a.get("content") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_heat = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)


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
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in text and "\x1b" not in text
    assert page.meta["Content-Security-Policy"] == dashboard.CSP and "http://" not in text and "https://" not in text
    body = " ".join(page.text)
    assert "Graded on NVIDIA H100 80GB HBM3 by cuda-lab-grader 0.1.0 (sources abcdef123456)" in body
    assert "Students whose grading hit an error (2)" in body
    assert {"students/bob/report.md", "students/eve/report.json"} <= set(page.links)
    assert "Not a final grade" not in body
    marked = dashboard.render(manifest, _records(), {"bob": ("gpu",)})
    assert "some checks did not run for 1 of 3 students" in marked


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


def _browser() -> str | None:
    return next((b for b in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if b), None)


@pytest.mark.skipif(_browser() is None, reason="no headless browser installed (Debian: apt-get install chromium)")
def test_a_headless_browser_renders_the_page(graded_class, tmp_path):
    browser = _browser()
    assert browser is not None
    page = graded_class / "dashboard.html"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = _parse(dom.stdout)
    assert [len(r) for r in rendered.rows if r] == [len(r) for r in _parse(page.read_text()).rows if r] != []
    assert "Class results: 2 students, 1 lab" in " ".join(rendered.text)
    shot = tmp_path / "dashboard.png"
    done = subprocess.run([browser, *flags, "--window-size=1200,900", f"--screenshot={shot}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000
