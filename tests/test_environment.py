"""Where the grader's own files go."""

from __future__ import annotations

import pytest

from grader import errors, paths

# ------------------------------------------------------------------ the grader's own files


def test_the_error_log_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADER_LOG", raising=False)
    monkeypatch.delenv("GRADER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    log = tmp_path / "xdg" / "cuda-lab-grader" / "internal-errors.log"
    assert errors.internal_error_log() == log
    assert paths.default_cache_dir() == log.parent  # beside the build cache
    message = errors.internal_error_message(RuntimeError("boom"))
    assert str(log) in message
    assert "RuntimeError: boom" in log.read_text()


@pytest.mark.parametrize("xdg", ["", None])
def test_the_error_log_without_xdg_is_in_the_home_cache(monkeypatch, tmp_path, xdg):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GRADER_LOG", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)  # empty means unset, as the XDG spec says
    assert errors.internal_error_log() == tmp_path / ".cache" / "cuda-lab-grader" / "internal-errors.log"


def test_grader_log_wins_and_an_empty_one_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "my.log"))
    assert errors.internal_error_log() == tmp_path / "my.log"
    monkeypatch.setenv("GRADER_LOG", "")
    assert errors.internal_error_log() == tmp_path / "xdg" / "cuda-lab-grader" / "internal-errors.log"


def test_the_cache_dir_variable_moves_only_the_build_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADER_LOG", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "builds"))
    assert paths.default_cache_dir() == tmp_path / "builds"
    assert errors.internal_error_log().parent == tmp_path / "xdg" / "cuda-lab-grader"
