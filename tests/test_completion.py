"""Shell completion: scripts generated from the parser, checked by the shells themselves."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import cli, completion
from grader.labspec.labs import lab_ids

KNOWN_COMMANDS = {"grade", "grade-repo", "validate", "readme", "labs", "check-lab", "completion"}
FAKE_LABS = "tiled_matmul       Tiled matrix multiplication (20 points)\nmemory_types       Memory types (20 points)\n"


def _parser_commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _script(shell: str, capsys) -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


@pytest.fixture
def fake_path(tmp_path) -> dict[str, str]:
    """A PATH whose ``cuda-grader`` prints a fixed list of labs, and a folder with two entries."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "cuda-grader"
    fake.write_text(f"#!/bin/sh\nprintf '%s' '{FAKE_LABS}'\n")
    fake.chmod(0o755)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "kernel.cu").write_text("")
    (tmp_path / "work" / "kout").mkdir()
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "TERM": "dumb"}


def test_the_parser_has_the_known_commands():
    assert KNOWN_COMMANDS <= set(_parser_commands())


def test_describe_reads_every_command_and_option():
    _, commands = completion.describe(cli._parser())
    assert [c.name for c in commands] == list(_parser_commands())
    by_name = {c.name: c for c in commands}
    grade = by_name["grade"]
    flags = {f: o for o in grade.options for f in o.flags}
    assert flags["--out"].value is not None and flags["--out"].value.kind == "path"
    assert flags["--stub"].value is None
    assert flags["--arch"].repeat and flags["--arch"].value is not None and flags["--arch"].value.kind == "text"
    assert "(default: 600)" in flags["--time-limit"].help  # argparse's %(default)g, expanded
    assert [p.value.kind for p in grade.positionals] == ["lab", "path"]
    assert [(p.value.kind, p.many) for p in by_name["validate"].positionals] == [("lab", True)]
    assert by_name["completion"].positionals[0].value.choices == completion.SHELLS
    assert by_name["grade"].help == "grade one .cu file for one lab"


def test_a_new_command_completes_without_editing_the_scripts():
    p = argparse.ArgumentParser(prog="cuda-grader")
    sub = p.add_subparsers(dest="command")
    n = sub.add_parser("new-thing", help="does a new thing")
    n.add_argument("--mode", choices=["fast", "slow"], help="how")
    n.add_argument("lab")
    for shell in completion.SHELLS:
        text = completion.script(p, shell)
        assert "new-thing" in text and "fast" in text, shell
        assert ("-l mode" if shell == "fish" else "--mode") in text, shell
        assert "_cuda_grader_labs" in text.split("new-thing", 1)[1], shell  # the positional completes labs


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_every_script_names_every_command_and_option(shell, capsys):
    text = _script(shell, capsys)
    for name, parser in _parser_commands().items():
        assert name in text, (shell, name)
        for action in parser._actions:
            for flag in action.option_strings:
                word = flag.lstrip("-") if shell == "fish" else flag  # fish writes -l out, -s v
                assert word in text, (shell, name, flag)


def test_the_labs_command_prints_ids_first(capsys):
    """The scripts take the first word of each line of `cuda-grader labs` as a lab id."""
    assert cli.main(["labs"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == lab_ids()


def test_an_unknown_shell_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["completion", "tcsh"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# ------------------------------------------------------------------ bash


def test_bash_accepts_the_script(tmp_path, capsys):
    path = tmp_path / "cuda-grader.bash"
    path.write_text(_script("bash", capsys))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


BASH_CASES = [
    (["gr"], ["grade", "grade-repo", "grade-class"]),
    (["grade", ""], ["tiled_matmul", "memory_types"]),
    (["grade", "ti"], ["tiled_matmul"]),
    (["grade", "tiled_matmul", "k"], ["kernel.cu", "kout"]),
    (["grade", "--out", "k"], ["kernel.cu", "kout"]),
    (["grade", "--out", "kout", "tiled_matmul", "ke"], ["kernel.cu"]),  # --out's value is no positional
    (["grade", "--arch", ""], []),
    (["grade-repo", "--no-"], ["--no-gpu", "--no-timing", "--no-counters", "--no-sanitizers", "--no-sandbox"]),
    (["grade-repo", "--lab", "m"], ["memory_types"]),
    (["validate", "tiled_matmul", "m"], ["memory_types"]),  # any number of labs
    (["completion", ""], ["bash", "zsh", "fish"]),
    (["--version", "grade", "t"], ["tiled_matmul"]),
]


@pytest.mark.parametrize("words, expected", BASH_CASES, ids=[" ".join(w) or "empty" for w, _ in BASH_CASES])
def test_bash_completes(words, expected, tmp_path, fake_path, capsys):
    script = tmp_path / "cuda-grader.bash"
    script.write_text(_script("bash", capsys))
    line = " ".join(f"'{w}'" for w in ["cuda-grader", *words])
    code = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); "
            "_cuda_grader; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", code], capture_output=True, text=True,
                          cwd=tmp_path / "work", env=fake_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [w for w in done.stdout.splitlines() if w] == expected


# ------------------------------------------------------------------ zsh and fish, where installed


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_accepts_and_registers_the_script(tmp_path, fake_path, capsys):
    path = tmp_path / "_cuda-grader"
    path.write_text(_script("zsh", capsys))
    done = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    code = f"autoload -U compinit; compinit -u -D; source {path}; print -r -- $_comps[cuda-grader]"
    done = subprocess.run(["zsh", "-f", "-c", code], capture_output=True, text=True, env=fake_path, timeout=60)
    assert done.stdout.strip() == "_cuda_grader", done.stderr


FISH_CASES = [
    ("cuda-grader gr", ["grade", "grade-repo", "grade-class"]),
    ("cuda-grader grade ti", ["tiled_matmul"]),
    ("cuda-grader grade-repo --no-", ["--no-counters", "--no-gpu", "--no-sandbox", "--no-sanitizers", "--no-timing"]),
    ("cuda-grader completion ", ["bash", "fish", "zsh"]),
    ("cuda-grader grade --out ke", ["kernel.cu"]),
]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
@pytest.mark.parametrize("line, expected", FISH_CASES, ids=[line for line, _ in FISH_CASES])
def test_fish_completes(line, expected, tmp_path, fake_path, capsys):
    path = tmp_path / "cuda-grader.fish"
    path.write_text(_script("fish", capsys))
    done = subprocess.run(["fish", "--no-execute", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"],
                          capture_output=True, text=True, cwd=Path(tmp_path / "work"), env=fake_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(w.split("\t")[0] for w in done.stdout.splitlines()) == sorted(expected)
