"""Shell completion for the command line: bash, zsh and fish scripts generated from its parser.

The scripts are written from the argparse parser itself, so a new subcommand or option completes
without anyone editing them. What a value completes to follows from how it is declared: a
``Path`` completes to files, ``choices`` to those choices, a lab (an argument whose name or
metavar is ``lab``/``labs``/``LAB``) to the ids ``cuda-grader labs`` prints; anything else to
nothing.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

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
    top, commands = describe(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](top, commands)


# ------------------------------------------------------------------ bash


def _bash_values(value: Value) -> str:
    """Shell code that fills COMPREPLY for ``value`` from the word ``$cur``."""
    if value.kind == "path":
        return f'{FUNC}_files "$cur"'
    if value.kind == "lab":
        return f'{FUNC}_words "$cur" $({FUNC}_labs)'
    if value.kind == "choice":
        return f'{FUNC}_words "$cur" {" ".join(shlex.quote(c) for c in value.choices)}'
    return "COMPREPLY=()"


def _bash_command(c: Command) -> list[str]:
    valued = [o for o in c.options if o.value is not None]
    flags = " ".join(f for o in c.options for f in o.flags)
    out = [f"        {shlex.quote(c.name)})"]
    if valued:
        by_action: dict[str, list[str]] = {}
        for o in valued:
            assert o.value is not None
            by_action.setdefault(_bash_values(o.value), []).extend(o.flags)
        out.append('            case $prev in')
        out += [f'                {"|".join(flags)}) {action}; return ;;' for action, flags in by_action.items()]
        out.append('            esac')
    out += ['            if [[ $cur == -* ]]; then',
            f'                {FUNC}_words "$cur" {flags}; return',
            '            fi']
    if c.positionals:
        takes = " ".join(f for o in valued for f in o.flags)
        out.append(f'            {FUNC}_position $((i + 1)) {shlex.quote(takes)}')
        out.append('            case $n in')
        for k, p in enumerate(c.positionals):
            pattern = "*" if p.many else str(k)
            out.append(f'                {pattern}) {_bash_values(p.value)} ;;')
        out.append('            esac')
    out.append("            ;;")
    return out


def _bash(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    names = " ".join(shlex.quote(c.name) for c in commands)
    top_flags = " ".join(f for o in top for f in o.flags)
    top_valued = " ".join(f for o in top if o.value is not None for f in o.flags)
    lines = [
        f"# bash completion for {PROG}, generated by `{PROG} completion bash`.",
        f'# Load it with: eval "$({PROG} completion bash)", or save it as',
        f"# ~/.local/share/bash-completion/completions/{PROG}.",
        "",
        f"{FUNC}_labs() {{",
        f"    command {PROG} labs 2>/dev/null | while read -r id _; do printf '%s\\n' \"$id\"; done",
        "}",
        "",
        f"{FUNC}_words() {{",
        '    local cur=$1; shift',
        '    COMPREPLY=($(compgen -W "$*" -- "$cur"))',
        "}",
        "",
        f"{FUNC}_files() {{",
        "    compopt -o filenames 2>/dev/null",
        "    COMPREPLY=()",
        "    local f",
        '    while IFS= read -r f; do COMPREPLY+=("$f"); done < <(compgen -f -- "$1")',
        "}",
        "",
        "# n: how many positionals come before the current word, from word $1 on; $2 lists the",
        "# options whose value is the next word.",
        f"{FUNC}_position() {{",
        "    local j word skip=",
        "    n=0",
        "    for ((j = $1; j < COMP_CWORD; j++)); do",
        "        word=${COMP_WORDS[j]}",
        "        if [[ -n $skip ]]; then skip=; continue; fi",
        '        if [[ $word == -* ]]; then',
        '            [[ $word != *=* && " $2 " == *" $word "* ]] && skip=1',
        "            continue",
        "        fi",
        "        ((n++))",
        "    done",
        "}",
        "",
        f"{FUNC}() {{",
        "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
        "    local cmd= i n",
        "    # the subcommand: the first word that is neither an option nor an option's value",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        f'        [[ " {top_valued} " == *" ${{COMP_WORDS[i]}} "* ]] && {{ ((i++)); continue; }}',
        '        [[ ${COMP_WORDS[i]} == -* ]] && continue',
        "        cmd=${COMP_WORDS[i]}",
        "        break",
        "    done",
        '    if [[ -z $cmd ]]; then',
        f'        {FUNC}_words "$cur" {names} {top_flags}',
        "        return",
        "    fi",
        "    case $cmd in",
    ]
    for c in commands:
        lines += _bash_command(c)
    lines += ["    esac", "}", "", f"complete -F {FUNC} {PROG}", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ zsh


def _zq(text: str) -> str:
    """``text`` inside a single-quoted zsh word."""
    return text.replace("'", "'\\''")


def _zdesc(text: str) -> str:
    """An _arguments description: brackets and colons have meanings there."""
    return _zq(re.sub(r"([\[\]:\\])", r"\\\1", text))


def _zsh_action(value: Value) -> str:
    label = _zdesc(value.label)
    if value.kind == "path":
        return f"{label}:_files"
    if value.kind == "lab":
        return f"{label}:{FUNC}_labs"
    if value.kind == "choice":
        return f"{label}:({' '.join(_zq(shlex.quote(c)) for c in value.choices)})"
    return f"{label}: "


def _zsh_option(o: Option) -> str:
    long_form = [f for f in o.flags if f.startswith("--")]
    spec = f"[{_zdesc(o.help)}]"
    if o.value is not None:
        spec += ":" + _zsh_action(o.value)
    if len(o.flags) == 1:
        flag = o.flags[0] + ("=" if o.value is not None and long_form else "")
        return f"'{'*' if o.repeat else ''}{flag}{spec}'"
    exclusive = "*" if o.repeat else f"({' '.join(o.flags)})"
    return f"'{exclusive}'{{{','.join(o.flags)}}}'{spec}'"


def _zsh_arguments(c: Command) -> list[str]:
    specs = [_zsh_option(o) for o in c.options]
    for k, p in enumerate(c.positionals, start=1):
        where = "*" if p.many else str(k)
        specs.append(f"'{where}:{':' if p.optional and not p.many else ''}{_zsh_action(p.value)}'")
    return [f"            {spec} \\" for spec in specs]


def _zsh(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    lines = [
        f"#compdef {PROG}",
        f"# zsh completion for {PROG}, generated by `{PROG} completion zsh`.",
        f"# Save it as _{PROG} in a folder of $fpath (before compinit runs), or load it with:",
        f"# source <({PROG} completion zsh)",
        "",
        f"{FUNC}_labs() {{",
        "  local -a labs",
        f"  labs=(${{(f)\"$(command {PROG} labs 2>/dev/null)\"}})",
        "  compadd -- ${labs%% *}",
        "}",
        "",
        f"{FUNC}() {{",
        "  local curcontext=$curcontext state line",
        "  typeset -A opt_args",
        "  _arguments -C \\",
        *[f"    {_zsh_option(o)} \\" for o in top],
        "    '1:command:->command' \\",
        "    '*::argument:->argument'",
        "  case $state in",
        "    command)",
        "      local -a commands",
        "      commands=(",
        *[f"        '{_zq(c.name)}:{_zq(c.help)}'" for c in commands],
        "      )",
        f"      _describe -t commands '{PROG} command' commands",
        "      ;;",
        "    argument)",
        "      case $line[1] in",
    ]
    for c in commands:
        lines += [f"        {shlex.quote(c.name)})", "          _arguments \\", *_zsh_arguments(c), "            && return 0",
                  "          ;;"]
    lines += [
        "      esac",
        "      ;;",
        "  esac",
        "}",
        "",
        "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then",
        f'  {FUNC} "$@"',
        "else",
        f"  compdef {FUNC} {PROG}",
        "fi",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------ fish


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
