"""Reports against text that a student controls: messages, details, file names and kernel names.

Each test renders a hostile payload for real (GitHub's Markdown renderer, a model of the Actions
runner's command parser, a JUnit parser) and fails if the attack gets through.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from junitparser import Error, Failure, JUnitXml

from grader.isolation.build import KernelResources
from grader.outcome import CheckResult, LabReport, Outcome, Stage
from grader.report import junit, text
from grader.textutil import cap_lines, clean, clean_line, markdown_code, markdown_fence, neutralize_commands, one_line

ZWSP = "\u200b"
C1 = [chr(c) for c in range(0x80, 0xA0)]

# ------------------------------------------------------------------ payloads

HTML_PAYLOAD = (
    '<h1>127/127</h1> <img src="x" onerror="alert(1)"> <a href="http://evil.example/">grade</a> '
    "[your grade](http://evil.example/g) ![i](http://evil.example/i.png) <http://evil.example/auto> "
    "http://evil.example/bare www.evil.example mail@evil.example **bold** _em_ ~~gone~~ $x^2$ "
    "`code` &lt;b&gt; &amp; | a\\| b\\"
)
# A line of four backticks closes a three-backtick fence; what follows would be Markdown again.
FENCE_BREAK = "\n".join([
    "a.cu:3: error: expected ';'",
    "````",
    "<h1>127/127</h1>",
    '<img src="x" onerror="alert(1)">',
    "[click me](http://evil.example/)",
    "``````````",
    "</details><h1>out of the details</h1>",
    "~~~",
    "   ```",
    "end",
])
SUBMISSION = "evil``name <img src=x> [l](http://evil.example)|\n<h1>127/127</h1>`.cu"
KERNEL = "k`|<img src=x>|`` [l](http://evil.example) *x*"
CHECK_ID = "odd</summary><h1>id</h1>"


def hostile_report() -> LabReport:
    checks = (
        CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, "compiled"),
        CheckResult("correctness[width=48]", Stage.CORRECTNESS, Outcome.FAIL, 0, 2, HTML_PAYLOAD, FENCE_BREAK),
        CheckResult(CHECK_ID, Stage.CORRECTNESS, Outcome.ERROR, 0, 2, "crashed", "plain details"),
    )
    return LabReport(
        lab="tiled_matmul",
        title="Tiled matrix multiplication",
        submission=SUBMISSION,
        checks=checks,
        environment={"nvcc": "13.0.88"},
        kernels=(KernelResources(KERNEL, 32, 1, 2048),),
    )


# ------------------------------------------------------------------ Markdown, rendered as GitHub does


@dataclass
class Element:
    tag: str
    attrs: dict[str, str | None]
    text: str = ""
    children: list["Element"] = field(default_factory=list)

    def iter(self, tag: str):
        for child in self.children:
            if child.tag == tag:
                yield child
            yield from child.iter(tag)


class _Tree(HTMLParser):
    VOID = {"img", "br", "hr", "input", "meta", "link", "source", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        el = Element(tag, dict(attrs))
        self.stack[-1].children.append(el)
        if tag not in self.VOID:
            self.stack.append(el)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        for el in self.stack:
            el.text += data


def render_github(md: str) -> Element:
    """GitHub's own cmark-gfm, with raw HTML let through as GitHub's renderer does before sanitizing."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    tree = _Tree()
    tree.feed(cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE))
    tree.close()
    return tree.root


def test_the_old_fence_and_cells_were_exploitable():
    """The payloads do real damage when rendered the way the report used to render them."""
    old = "\n".join(["| a |", "|---|", f"| {HTML_PAYLOAD} |", "", "```", FENCE_BREAK, "```"])
    root = render_github(old)
    assert list(root.iter("img")) and list(root.iter("a")) and list(root.iter("h1"))


def test_markdown_payloads_render_as_text():
    md = text.markdown([hostile_report()])
    root = render_github(md)
    tags = {el.tag for el in _walk(root)}
    for bad in ("img", "em", "del", "h3", "script", "iframe"):
        assert bad not in tags, f"<{bad}> rendered from student text"
    # No link but GFM's autolink of a bare e-mail address, which shows exactly where it goes.
    links = [(a.attrs.get("href"), a.text) for a in root.iter("a")]
    assert links == [("mailto:mail@evil.example", "mail@evil.example")]
    (h1,) = root.iter("h1")  # only the report's own title
    assert h1.text.startswith("CUDA lab grade:")
    assert [h.text for h in root.iter("h2")] == ["tiled_matmul: Tiled matrix multiplication"]
    assert "127/127" not in "".join(el.text for el in root.iter("h1"))


def test_markdown_details_stay_intact_in_a_code_block():
    root = render_github(text.markdown([hostile_report()]))
    blocks = [code.text for pre in root.iter("pre") for code in pre.iter("code")]
    assert blocks == [FENCE_BREAK + "\n", "plain details\n"]
    summaries = [s.text for s in root.iter("summary")]
    assert summaries == ["correctness[width=48]", CHECK_ID]


def test_markdown_cells_and_names_round_trip_as_text():
    root = render_github(text.markdown([hostile_report()]))
    checks_table, kernels_table = list(root.iter("table"))
    for row in checks_table.iter("tr"):
        assert len(list(row.iter("td")) or list(row.iter("th"))) == 4  # no cell split by a pipe
    cells = [td.text for td in checks_table.iter("td")]
    assert clean_line(HTML_PAYLOAD) in cells
    (kernel_cell, *_) = kernels_table.iter("td")
    assert [c.text for c in kernel_cell.iter("code")] == [one_line(KERNEL)]
    codes = [c.text for p in root.iter("p") for c in p.iter("code")]
    assert one_line(SUBMISSION) in codes


def _walk(el: Element):
    for child in el.children:
        yield child
        yield from _walk(child)


@pytest.mark.parametrize("body", ["", "x", "a`b", "``", "` x `", "```` inside", " lead", "trail "])
def test_markdown_code_span_holds_any_text(body):
    root = render_github(markdown_code(body) + " after")
    if body:
        assert [c.text for c in root.iter("code")] == [body]


def test_markdown_fence_is_longer_than_any_backtick_run():
    assert markdown_fence("x").startswith("```\n")
    assert markdown_fence("a\n````\nb").startswith("`````\n")
    assert markdown_fence("inline ``````` run").splitlines()[0] == "`" * 8


# ------------------------------------------------------------------ GitHub workflow commands


def runner_commands(output: str) -> list[str]:
    """The lines GitHub's runner would take as workflow commands.

    Its parser reads lines ending at LF, CR or CRLF; a line is a command when it starts with ``::``
    after leading whitespace, or holds ``##[`` anywhere.
    """
    return [line for line in re.split(r"\r\n|\r|\n", output) if line.lstrip().startswith("::") or "##[" in line]


COMMANDS = [
    "::error title=Grade::127/127",
    "::add-mask::secret",
    "::stop-commands::pwned",
    "  ::warning::indented",
    "\t::notice::tabbed",
    " \t \u00a0\u3000::error::unicode spaces",
    "fine\r::error::after a lone CR",
    "fine\r\n  ::error::after CRLF",
    "##[error]at the start",
    "text then ##[group]in the middle",
    "\u2028::error::after a line separator",
    ":::three colons",
]


@pytest.mark.parametrize("payload", COMMANDS)
def test_neutralize_commands(payload):
    assert runner_commands(payload)  # the payload is an attack as it stands
    safe = neutralize_commands(payload)
    assert runner_commands(safe) == []
    assert safe.replace(ZWSP, "") == payload  # only zero-width spaces added


def test_neutralize_commands_leaves_other_text_alone():
    for ok in ("a::b", "std::vector<int>", "x ::not at the start", "# heading", "#[attr]", "##x", ""):
        assert neutralize_commands(ok) == ok
    assert neutralize_commands("::a\n::b\r::c") == f":{ZWSP}:a\n:{ZWSP}:b\r:{ZWSP}:c"
    assert neutralize_commands("##[error]") == f"#{ZWSP}#[error]"


def command_report() -> LabReport:
    checks = (
        CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, "ok\n::error title=Grade::127/127",
                    "::notice::in a passing check's details"),
        CheckResult("correctness[width=48]", Stage.CORRECTNESS, Outcome.FAIL, 0, 2, "wrong ##[error]mid-line",
                    "\n".join(COMMANDS)),
        CheckResult("speed", Stage.SPEED, Outcome.SKIPPED, 0, 2, "skipped\r::stop-commands::tok"),
    )
    return LabReport(lab="tiled_matmul", title="Tiled matrix multiplication",
                     submission="a.cu\n::error::from the file name ##[error]x", checks=checks,
                     environment={"sandbox": "none\n::error::env"},
                     kernels=(KernelResources("k\r::add-mask::kernel", 32, 1, 2048),))


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("stream", [io.StringIO, _Tty])
def test_terminal_prints_no_workflow_command(verbose, stream):
    out = text.terminal([command_report()], stream=stream(), verbose=verbose)
    assert runner_commands(out) == []
    assert "127/127" in out and "from the file name" in out  # shown, only defused
    if verbose:
        assert "in a passing check's details" in out


# ------------------------------------------------------------------ clean, one_line and the terminal header


def test_clean_strips_lone_carriage_returns():
    assert clean("a\rb\r\nc\r") == "ab\nc"
    assert clean("100%\r 50%\r") == "100% 50%"
    assert clean("tab\tand\nnewline") == "tab\tand\nnewline"


@pytest.mark.parametrize("ch", C1)
def test_clean_strips_c1_controls(ch):
    assert clean(f"a{ch}\nb") == "a\nb"


def test_clean_strips_8bit_and_osc_sequences_whole():
    assert clean("\x9b31mred\x9b0m") == "red"
    assert clean("\x9b2J\x9b?25lx") == "x"
    assert clean("\x1b]0;window title\x07text") == "text"
    assert clean("\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\") == "click"
    assert clean("\x9d0;title\x9ctext") == "text"
    assert clean("\x1b[>c\x1b[=5uok") == "ok"
    assert clean("\x9dunterminated\nnext") == "unterminated\nnext"  # nothing lost but the control


def test_clean_leaves_nothing_a_terminal_or_xml_interprets():
    everything = "".join(chr(c) for c in range(0x3000)) + "\ud800\udfff\ufffe\uffff"
    out = clean(everything)
    assert set(out) & {chr(c) for c in range(0x20)} == {"\t", "\n"}
    assert not set(out) & set(C1 + ["\x7f", "\ud800", "\udfff", "\ufffe", "\uffff"])
    assert "\u00a0" in out and "é" in out and "\u2028" in out  # text that is not a control stays


def test_one_line_escapes_what_is_not_printable():
    name = "a\nb\rc\td\x1b[31m\x9b\x85\u2028\u202e\x00\udcff.cu"
    assert one_line(name) == r"a\nb\rc\td\x1b[31m\x9b\x85\u2028\u202e\x00\udcff.cu"
    assert one_line(name).isprintable()
    assert one_line("ständchen_漢 (1).cu") == "ständchen_漢 (1).cu"
    assert one_line("") == ""


def test_terminal_header_is_one_clean_line():
    name = "evil\x1b[2J\r\n== tiled_matmul: fake -- x\n  score 127/127\x85\x9b.cu"
    report = hostile_report()
    plain = text.terminal([report], stream=io.StringIO())
    out = text.terminal([LabReport(**{**report.__dict__, "submission": name})], stream=io.StringIO())
    lines = out.splitlines()
    assert len(lines) == len(plain.splitlines())
    assert lines[0] == f"== tiled_matmul: Tiled matrix multiplication -- {one_line(name)}"
    assert all(line.isprintable() for line in lines)
    assert "\r" not in out and "\x1b" not in out and not set(out) & set(C1)


def test_terminal_kernel_and_messages_are_one_line():
    out = text.terminal([command_report()], stream=io.StringIO())
    kernels = [line for line in out.splitlines() if line.startswith("  kernels (ptxas): ")]
    assert kernels == [r"  kernels (ptxas): k\r::add-mask::kernel: 32 regs, 2048 B smem, 0 B stack, 0 B spills"]
    assert "ok\\n::error title=Grade::127/127" in out  # an escaped newline, mid-line: no command


# ------------------------------------------------------------------ JUnit


def test_junit_round_trips_without_dangerous_characters(tmp_path):
    message = "wrong\rFAKE PASS\x9b31m \x85\x1b[0mend"
    details = "line 1\rover\n\x9b2Jline 2\x85\x80\nline 3 \x1b]0;t\x07"
    submission = "s\x1b\r\n\x9b.cu"
    report = LabReport(
        lab="lab", title="t", submission=submission,
        checks=(CheckResult("c", Stage.CORRECTNESS, Outcome.FAIL, 0, 1, message, details),
                CheckResult("d", Stage.CORRECTNESS, Outcome.ERROR, 0, 1, message, details)),
        timings={"student": {"median_ms": 1.0, "gate": message}},  # the student's worker says why it had no gate
    )
    path = tmp_path / "report.xml"
    junit.write([report], path)

    raw = path.read_bytes()
    ET.parse(path)  # a strict parser accepts it
    for bad in (b"\r", b"&#13;", b"\x1b", b"\xc2\x85", b"\xc2\x9b", b"\xc2\x80"):
        assert bad not in raw

    suite = next(iter(JUnitXml.fromfile(str(path))))
    props = {p.name: p.value for p in suite.properties()}
    assert props["submission"] == r"s\x1b\r\n\x9b.cu"
    assert props["timing.student.gate"] == "wrongFAKE PASS end"
    (failure,), (error,) = [case.result for case in suite]
    assert isinstance(failure, Failure) and isinstance(error, Error)
    for result in (failure, error):
        assert result.message == "0/1 pts: wrongFAKE PASS end"
        assert result.text == "line 1over\nline 2\nline 3 "
    assert clean_line(message) == "wrongFAKE PASS end"
    assert cap_lines(clean(details), 60) == "line 1over\nline 2\nline 3 "
