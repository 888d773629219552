"""The CLI's application object: one console pair, `say`, `abort`, JSON output and a spinner.

Command bodies stay short because the plumbing lives here (hatch's `Application`): human messages go
to stderr, machine output (--json, run ids) to stdout, and `abort` raises a LaunchError that the
root group turns into the exit code. It must not contain command logic. The rich consoles are made
on first use: `status --json` in a script loop never pays for importing rich. The option types every
command shares live here too (`Seconds`, `Price`: finite numbers in a range).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

import click

from launcher.core.errors import EXIT_BAD_INPUT, LaunchError

if TYPE_CHECKING:
    from rich.console import Console


class Application:
    @cached_property
    def out(self) -> Console:
        from rich.console import Console

        return Console(highlight=False, soft_wrap=True)

    @cached_property
    def err(self) -> Console:
        from rich.console import Console

        return Console(stderr=True, highlight=False, soft_wrap=True)

    def say(self, message: str) -> None:
        self.err.print(message, markup=False)

    def print(self, message: str) -> None:
        self.out.print(message, markup=False)

    def emit_json(self, obj: Any) -> None:
        text = json.dumps(obj, default=str, sort_keys=True)
        if sys.stdout.isatty() and self.out.is_terminal:
            self.out.print_json(text)
        else:
            print(text, flush=True)

    def abort(self, message: str, fix: str = "", code: int = EXIT_BAD_INPUT) -> NoReturn:
        raise LaunchError(message, fix, exit_code=code)

    @contextlib.contextmanager
    def spinner(self, message: str) -> Iterator[None]:
        if self.err.is_terminal:
            with self.err.status(message):
                yield
        else:
            yield


class Finite(click.FloatRange):
    """A number within the range, and finite: click's FloatRange lets `nan` through (nan < 0 is False),
    and `inf` passes any lower bound. A `watch --lost-after nan` never replaced a lost pod (waited >=
    nan is never true), a `pull --wait nan` waited forever, a `--max-price nan` compared False with
    every offer's price; `inf` sleeps overflow or never end. Exit 2 naming the option and the value."""

    what = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite {self.what}.", param, ctx)
        return rv


class Seconds(Finite):
    what = "number of seconds"


class Price(Finite):
    what = "price in $/h"
