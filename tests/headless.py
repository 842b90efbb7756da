"""A real headless browser for the tests of the grader's pages: Chromium's own command line for a
screenshot and the DOM after the page's scripts ran, and its DevTools protocol over a pipe
(``--remote-debugging-pipe``: no port, no driver, no package to install) for real clicks.

Tests that use it skip with the reason where no browser is installed (Debian: ``apt-get install
chromium``)."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str | None:
    return next((b for b in (shutil.which(n) for n in NAMES) if b), None)


needs_browser = pytest.mark.skipif(browser() is None, reason="no headless browser installed (Debian: apt-get install chromium)")


def flags(profile: Path) -> list[str]:
    """Headless, offline, nothing of the user's: a fresh profile, no background fetches."""
    return ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync", "--disable-background-networking",
            "--disable-component-update", f"--user-data-dir={profile}"]


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    path = browser()
    assert path is not None
    done = subprocess.run([path, *flags(profile), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def dump_dom(url: str, profile: Path) -> str:
    """The page's DOM once it has loaded and its scripts have run."""
    return _run(["--dump-dom", url], profile).stdout


def screenshot(url: str, shot: Path, profile: Path, size: tuple[int, int] = (1400, 1000)) -> bytes:
    _run([f"--window-size={size[0]},{size[1]}", f"--screenshot={shot}", url], profile)
    return shot.read_bytes()


class Page:
    """One page in a headless browser, driven over the DevTools protocol on a pipe (fd 3 takes
    commands, fd 4 gives replies, each a JSON text ending in a NUL byte)."""

    def __init__(self, url: str, profile: Path, size: tuple[int, int] = (1400, 1000)) -> None:
        path = browser()
        assert path is not None
        commands, self._to_browser = os.pipe()
        self._from_browser, replies = os.pipe()

        def at_3_and_4() -> None:  # in the child: the pipe's ends where the browser looks for them
            a, b = os.dup(commands), os.dup(replies)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([path, *flags(profile), "--remote-debugging-pipe", f"--window-size={size[0]},{size[1]}", url],
                                     preexec_fn=at_3_and_4, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands)
        os.close(replies)
        self._buffer, self._next = b"", 0
        try:
            page = next(t for t in self._call("Target.getTargets")["targetInfos"] if t["type"] == "page")
            self._session = self._call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
            deadline = time.monotonic() + 30
            loaded = f"document.readyState === 'complete' && location.href === {json.dumps(url)}"
            while not self.evaluate(loaded):  # the first page may still be the blank one
                assert time.monotonic() < deadline, f"{url} did not load in 30 s"
                time.sleep(0.05)
        except BaseException:
            self.close()
            raise

    def _call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            while b"\0" not in self._buffer:
                assert select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))[0], f"no reply to {method}"
                chunk = os.read(self._from_browser, 1 << 16)
                assert chunk, f"the browser went away during {method}"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next:
                assert "error" not in reply, reply["error"]
                result: dict[str, Any] = reply["result"]
                return result

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        reply = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self._session)
        assert "exceptionDetails" not in reply, reply["exceptionDetails"]
        return reply["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) in the middle of the first element ``selector`` finds."""
        x, y = self.evaluate(f"(function () {{ var e = document.querySelector({json.dumps(selector)}); e.scrollIntoView(); "
                             "var r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self._call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}, self._session)

    def close(self) -> None:
        try:
            self._call("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
