"""Making tool output safe and short enough for reports (XML, Markdown, terminals)."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# XML 1.0 allows tab, LF, CR and everything from 0x20 except surrogates and U+FFFE/U+FFFF.
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def clean(text: str) -> str:
    """Strip ANSI escapes and characters that XML cannot hold."""
    return _ILLEGAL_XML.sub("", _ANSI.sub("", text.replace("\r\n", "\n")))


def cap_lines(text: str, max_lines: int, max_chars: int = 8000) -> str:
    lines = text.splitlines()
    if len(lines) > max_lines:
        omitted = len(lines) - max_lines
        lines = lines[:max_lines] + [f"[... {omitted} lines omitted]"]
    out = "\n".join(lines)
    if len(out) > max_chars:
        out = out[:max_chars] + f"\n[... {len(out) - max_chars} characters omitted]"
    return out


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
        return f"[... {self.omitted:,} bytes of output omitted]" if self.omitted > 0 else ""

    def text(self) -> str:
        middle = f"\n{self.omitted_note()}\n" if self.omitted > 0 else ""
        return self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")
