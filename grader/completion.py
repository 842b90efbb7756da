"""Shell completion for the command line: bash, zsh and fish scripts generated from its parser.

The scripts are written from the argparse parser itself, so a new subcommand or option completes
without anyone editing them: bash's and zsh's by shtab, fish's (which shtab does not write) here.
What a value completes to follows from how it is declared: a ``Path`` completes to files,
``choices`` to those choices, a lab (an argument whose name or metavar is ``lab``/``labs``/``LAB``)
to the ids ``cuda-grader labs`` prints; anything else to nothing.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path

import shtab

SHELLS = ("bash", "zsh", "fish")
PROG = "cuda-grader"
FUNC = "_cuda_grader"
#: How a lab id is recognised among the arguments.
_LAB_NAMES = {"lab", "labs", "LAB"}


@dataclass(frozen=True)
class Value:
    """What an option's value or a positional completes to."""

    kind: str  # "path", "lab", "choice" or "text"
    choices: tuple[str, ...] = ()
    label: str = "value"


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    value: Value | None  # None: a flag that takes no value
    repeat: bool


@dataclass(frozen=True)
class Positional:
    help: str
    value: Value
    many: bool  # takes every remaining word
    optional: bool


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    positionals: tuple[Positional, ...]


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    try:
        text = text % {**vars(action), "prog": prog}  # as argparse shows it: %(default)s, %%
    except (KeyError, TypeError, ValueError):
        pass
    return " ".join(text.split())


def _value(action: argparse.Action) -> Value:
    label = str(action.metavar or action.dest)
    if action.choices is not None:
        return Value("choice", tuple(str(c) for c in action.choices), label)
    if action.type is Path:
        return Value("path", (), label)
    if action.dest in _LAB_NAMES or action.metavar in _LAB_NAMES:
        return Value("lab", (), "lab")
    return Value("text", (), label)


def _options(parser: argparse.ArgumentParser) -> tuple[tuple[Option, ...], tuple[Positional, ...]]:
    options, positionals = [], []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        text = _help(action, parser.prog)
        if action.option_strings:
            takes = action.nargs != 0
            repeat = isinstance(action, (argparse._AppendAction, argparse._CountAction))
            options.append(Option(tuple(action.option_strings), text, _value(action) if takes else None, repeat))
        else:
            many = action.nargs in ("*", "+", argparse.REMAINDER)
            positionals.append(Positional(text, _value(action), many, action.nargs in ("?", "*")))
    return tuple(options), tuple(positionals)


def describe(parser: argparse.ArgumentParser) -> tuple[tuple[Option, ...], tuple[Command, ...]]:
    """The parser's own options and each subcommand, with its options and positionals."""
    top, _ = _options(parser)
    commands = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: _help(a, parser.prog) for a in action._choices_actions}
            for name, sub in action.choices.items():
                options, positionals = _options(sub)
                commands.append(Command(name, helps.get(name, ""), options, positionals))
    return top, tuple(commands)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    if shell == "fish":
        return _fish(*describe(parser))
    return shtab.complete(_marked(parser), shell, preamble=_PREAMBLE[shell]) + _ALIAS[shell]


#: Lab ids: the first word of each line ``cuda-grader labs`` prints (the labs found from where the shell is).
_PREAMBLE = {
    "bash": f"{FUNC}_labs() {{ compgen -W \"$(command {PROG} labs 2>/dev/null | cut -d' ' -f1)\" -- \"$1\"; }}\n",
    "zsh": f"{FUNC}_labs() {{ local -a ids; ids=(${{(f)\"$(command {PROG} labs 2>/dev/null | cut -d' ' -f1)\"}}); "
           "_describe 'lab' ids; }\n",
}
#: The completion function under the grader's own name, as the earlier scripts had it.
_ALIAS = {
    "bash": f"\n{FUNC}() {{ _shtab_cuda_grader \"$@\"; }}\ncomplete -o filenames -F {FUNC} {PROG}\n",
    "zsh": f"\n{FUNC}() {{ _shtab_cuda_grader \"$@\"; }}\n(( $+functions[compdef] )) && compdef {FUNC} {PROG}\n",
}


def _marked(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A copy of ``parser`` whose Path values complete to files and lab arguments to lab ids."""
    parser = copy.deepcopy(parser)
    todo = [parser]
    while todo:
        for action in todo.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
                continue
            kind = _value(action).kind
            if kind == "path":
                action.complete = shtab.FILE  # type: ignore[attr-defined]
            elif kind == "lab":
                action.complete = {"bash": f"{FUNC}_labs", "zsh": f"{FUNC}_labs"}  # type: ignore[attr-defined]
    return parser


def _fq(text: str) -> str:
    """``text`` as one single-quoted fish word."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_value(value: Value) -> str:
    if value.kind == "path":
        return "-r -F"
    if value.kind == "lab":
        return f"-x -a '({FUNC}_labs)'"
    if value.kind == "choice":
        return f"-x -a {_fq(' '.join(value.choices))}"
    return "-x"


def _fish_flags(o: Option) -> str:
    parts = []
    for f in o.flags:
        parts.append(f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}")
    return " ".join(parts)


def _fish(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    lines = [
        f"# fish completion for {PROG}, generated by `{PROG} completion fish`.",
        f"# Save it as ~/.config/fish/completions/{PROG}.fish",
        "",
        f"function {FUNC}_labs",
        f"    command {PROG} labs 2>/dev/null | string replace -r ' .*' ''",
        "end",
        "",
        f"complete -c {PROG} -f",
    ]
    first = "-n __fish_use_subcommand"
    for o in top:
        lines.append(f"complete -c {PROG} {first} {_fish_flags(o)} -d {_fq(o.help)}")
    for c in commands:
        lines.append(f"complete -c {PROG} {first} -a {_fq(c.name)} -d {_fq(c.help)}")
    for c in commands:
        seen = f"-n {_fq('__fish_seen_subcommand_from ' + c.name)}"
        for o in c.options:
            value = f" {_fish_value(o.value)}" if o.value is not None else ""
            lines.append(f"complete -c {PROG} {seen} {_fish_flags(o)}{value} -d {_fq(o.help)}")
        for p in c.positionals:
            what = {"path": "-F", "lab": f"-a '({FUNC}_labs)'", "choice": f"-a {_fq(' '.join(p.value.choices))}"}
            if p.value.kind in what:
                lines.append(f"complete -c {PROG} {seen} {what[p.value.kind]} -d {_fq(p.help)}")
    return "\n".join(lines) + "\n"
