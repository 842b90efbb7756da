"""Making tool output safe and short enough for reports (XML, Markdown, terminals, CI logs)."""

from __future__ import annotations

import html
import re

# CSI (7-bit ESC [ or 8-bit U+009B), OSC (ESC ] or U+009D, ended by BEL or ST within the line)
# and the other two-character escapes; a lone introducer is left to _UNSAFE.
_ANSI = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[@-Z\\-_]"
)
# What neither XML 1.0 nor a terminal should get: C0 controls except tab and LF (so lone CRs
# too), DEL, the C1 controls U+0080..U+009F, lone surrogates and U+FFFE/U+FFFF.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
# Bidirectional controls: embeddings and overrides (U+202A..U+202E), isolates (U+2066..U+2069) and
# the marks (U+200E, U+200F, U+061C). In a terminal, an editor or a rendered report they reorder
# what follows, so a line can show other text than it holds ("Trojan Source").
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
_BIDI = re.compile(f"[{BIDI_CONTROLS}]")
# GitHub's runner reads workflow commands from each line of a step's output (lines end at LF or
# CR): ``::name::`` after leading whitespace, and ``##[name]`` anywhere in the line.
_COMMAND = re.compile(r"(?:\A|(?<=[\r\n]))\s*:(?=:)|#(?=#\[)")
_ZWSP = "\u200b"
# Markdown that renders as something other than the text: HTML, emphasis, links, images, code,
# strikethrough, math and table pipes; URL and www. autolinks are defused below. (GFM still turns
# a bare e-mail address into a mailto: link showing that same address: no escape prevents that.)
_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"} | {c: "\\" + c for c in "\\`*_[]!|~$"})
_MD_AUTOLINK = re.compile(r"(?i)(?<=www)\.|:(?=//)")


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, with an s unless there is exactly one: "1 student", "0 students"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def quoted_line(source: tuple[str, ...], line: int, limit: int = 100) -> str:
    """Line ``line`` (from 1) of ``source`` as inline code, its runs of blanks made one and cut at
    ``limit`` characters; "" where there is no such line or it is blank."""
    code = " ".join(source[line - 1].split()) if 0 < line <= len(source) else ""
    return f"`{code[:limit]}`" if code else ""


def strip_controls(text: str) -> str:
    """Strip ANSI escapes, lone CRs, bidirectional controls and characters that XML or a terminal
    must not get (keeps tab and LF)."""
    return _BIDI.sub("", _UNSAFE.sub("", _ANSI.sub("", text.replace("\r\n", "\n"))))


def clean(text: str) -> str:
    """Tool or student text for any report (terminal, Markdown, JUnit XML, Gradescope): controls
    stripped (:func:`strip_controls`) and GitHub workflow commands defused. Every report format
    passes student text through this (or :func:`clean_line`) before its own escaping."""
    return neutralize_commands(strip_controls(text))


def _escape_char(ch: str) -> str:
    return repr(ch)[1:-1]  # \n, \t, \x1b, \u202e, \udcff: what Python's repr shows


def one_line(text: str) -> str:
    """``text`` (a name) as one printable line: control, format and separator characters as escapes."""
    return "".join(ch if ch.isprintable() else _escape_char(ch) for ch in text)


def clean_line(text: str) -> str:
    """Tool output for a one-line field: controls stripped, ``one_line`` of what is left, workflow
    commands defused."""
    return neutralize_commands(one_line(strip_controls(text)))


def neutralize_commands(text: str) -> str:
    """Defuse GitHub workflow commands (``::error::``, ``##[error]``) with a zero-width space."""
    return _COMMAND.sub(lambda m: m.group(0) + _ZWSP, text)


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall("`+", text)), default=0)


def markdown_text(text: str) -> str:
    """``text`` as inline Markdown that renders as itself: no HTML, links, images or emphasis."""
    return _MD_AUTOLINK.sub(lambda m: "\\" + m.group(0), text.translate(_MD_ESCAPES))


# A CUDA identifier that starts with two underscores (``__constant__``, ``__shared__``,
# ``__syncthreads()``), with the backticks of a message that already quotes it: GitHub would
# render ``__constant__`` as bold "constant", and an escaped one is still not code.
_CUDA_IDENTIFIER = re.compile(r"`(?P<quoted>__[A-Za-z0-9_]+(?:\(\))?)`|(?<![\w`])(?P<bare>__[A-Za-z0-9_]*[A-Za-z0-9][A-Za-z0-9_]*(?:\(\))?)")


def markdown_prose(text: str, *, in_table: bool = False) -> str:
    """``text`` as inline Markdown that renders as itself (as :func:`markdown_text`), with CUDA's
    double-underscore identifiers as code spans."""
    out, last = [], 0
    for m in _CUDA_IDENTIFIER.finditer(text):
        out += [markdown_text(text[last:m.start()]), markdown_code(m["quoted"] or m["bare"], in_table=in_table)]
        last = m.end()
    out.append(markdown_text(text[last:]))
    return "".join(out)


def markdown_code(text: str, *, in_table: bool = False) -> str:
    """``text`` as a code span whose delimiter is longer than any backtick run inside it."""
    ticks = "`" * (_longest_backtick_run(text) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    body = text.replace("|", "\\|") if in_table else text
    return f"{ticks}{pad}{body}{pad}{ticks}"


def markdown_fence(text: str) -> str:
    """``text`` as a fenced code block that no line inside it can close."""
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{fence}\n{text}\n{fence}"


def html_text(text: str) -> str:
    """``text`` for an HTML element's content (as in ``<summary>``)."""
    return html.escape(text, quote=False)


def html_line(text: object) -> str:
    """Tool or student text as one line of an HTML page, in an element or an attribute."""
    return html.escape(clean_line(str(text)), quote=True)


#: A cell a spreadsheet reads as a number, sign and all (``-5``, ``+1.5``, ``2e3``): no formula.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: What a spreadsheet takes for the start of a formula (OWASP's list for CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def formula_safe(text: str) -> str:
    """``text`` as a CSV cell that a spreadsheet never runs as a formula: an apostrophe before one
    that starts like a formula, unless it is a plain number (``-5``), which a spreadsheet reads as
    that number. Nothing else changes: an identity that an import matches keeps every character."""
    return "'" + text if text[:1] in FORMULA_STARTS and not _NUMBER.fullmatch(text) else text


def sheet_cell(text: str) -> str:
    """A CSV cell a spreadsheet shows as text: one clean line, and no formula (:func:`formula_safe`)."""
    return formula_safe(clean_line(text))


#: The content security policy of the grader's HTML pages: they load nothing from anywhere.
HTML_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def cap_lines(text: str, max_lines: int, max_chars: int = 8000) -> str:
    lines = text.splitlines()
    if len(lines) > max_lines:
        omitted = len(lines) - max_lines
        lines = lines[:max_lines] + [f"[... {omitted} lines omitted]"]
    out = "\n".join(lines)
    if len(out) > max_chars:
        out = out[:max_chars] + f"\n[... {len(out) - max_chars} characters omitted]"
    return out


#: What marks the place where ``CappedOutput`` left output out.
OMITTED = "bytes of output omitted]"


class CappedOutput:
    """A program's output kept within bounds: the first ``head`` and last ``tail`` bytes."""

    def __init__(self, head: int, tail: int):
        self.head_cap, self.tail_cap = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def omitted_note(self) -> str:
        return f"[... {self.omitted:,} {OMITTED}" if self.omitted > 0 else ""

    def text(self) -> str:
        middle = f"\n{self.omitted_note()}\n" if self.omitted > 0 else ""
        return self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")
