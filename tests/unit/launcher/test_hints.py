"""Every hint the CLI can print names options that exist on the command it names.

Collects each string literal in launcher/ (f-strings with their placeholders blanked) that says
`nsa-launch CMD [SUB] ... --option`, and checks through click's own introspection that CMD (and SUB)
exist and accept each option named after them. A bare "pass --option" without a command must at
least be an option of some command. Both kinds have told people to pass options that do not exist
(doctor said `--accept-new-host-key`, which only `up` had).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

from launcher.cli import cli

ROOT = Path(__file__).resolve().parents[3] / "launcher"
# "nsa-launch pods down RUN --keep ..." up to where the hint ends: a backtick, ";", ")" or a new
# line ("nsa-launch dashboard:" is a name, not a hint).
HINT = re.compile(r"nsa-launch ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)(?![\w:-])([^`;)\n]*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _strings(path: Path, docstrings: bool = True) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    if not docstrings:  # module, class and function docstrings explain code; they are not printed
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                skip.add(id(body[0].value))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
            out.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out


def _command(words: list[str]) -> tuple[click.Command | None, list[str]]:
    """The click command the words name (a group's subcommand when the second word is one)."""
    ctx = click.Context(cli)
    cmd = cli.get_command(ctx, words[0])
    if cmd is None:
        return None, words
    if isinstance(cmd, click.Group) and len(words) > 1:
        sub = cmd.get_command(ctx, words[1])
        if sub is not None:
            return sub, words[2:]
    return cmd, words[1:]


def _options(cmd: click.Command) -> set[str]:
    names = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    return names | {"--help", "-h"}


def _hints() -> list[tuple[str, str, str, list[str]]]:
    """Every `nsa-launch CMD ...` in a string (click help texts included); prose such as "nsa-launch
    sets it" is told apart by its first word not being a command name."""
    ctx = click.Context(cli)
    commands = set(cli.list_commands(ctx))
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for line, text in _strings(path):
            for m in HINT.finditer(text):
                if m.group(1).split()[0] not in commands:
                    continue
                opts = OPTION.findall(m.group(2))
                found.append((f"{path.relative_to(ROOT.parent)}:{line}", m.group(1), m.group(0), opts))
    return found


HINTS = _hints()


def test_the_collector_finds_the_hints():
    # The collector itself must work: these hints exist today.
    texts = " | ".join(h for _, _, h, _ in HINTS)
    assert "nsa-launch pull --run" in texts
    assert len(HINTS) > 30


@pytest.mark.parametrize(("where", "command", "hint", "opts"), HINTS, ids=[w for w, _, _, _ in HINTS])
def test_hint_names_a_real_command_and_real_options(where: str, command: str, hint: str, opts: list[str]):
    words = command.split()
    cmd, _ = _command(words)
    assert cmd is not None, f"{where}: {hint!r} names no nsa-launch command"
    missing = [o for o in opts if o not in _options(cmd)]
    assert not missing, f"{where}: {hint!r}: `nsa-launch {words[0]}` has no {missing}"


def test_every_option_named_anywhere_exists_on_some_command():
    every: set[str] = set()
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        every |= _options(cmd)
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                every |= _options(cmd.get_command(ctx, sub))
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.parts[-2] == "host" or path.name in ("wrapper.py",):
            continue  # the host agent's own argv (torchrun, tmux, tensorboard), not nsa-launch's
        for line, text in _strings(path, docstrings=False):
            if not re.search(r"\b(pass|with|re-run|add|use)\b[^.]*--[a-z]", text):
                continue
            for opt in OPTION.findall(text):
                if opt not in every:
                    bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {opt} in {text[:100]!r}")
    assert not bad, "\n".join(bad)
