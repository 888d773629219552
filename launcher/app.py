"""The CLI's application object: one console pair, `say`, `abort`, JSON output and a spinner.

Command bodies stay short because the plumbing lives here (hatch's `Application`): human messages go
to stderr, machine output (--json, run ids) to stdout, and `abort` raises a LaunchError that the
root group turns into the exit code. It must not contain command logic.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, NoReturn

from rich.console import Console

from launcher.errors import EXIT_BAD_INPUT, LaunchError


class Application:
    def __init__(self) -> None:
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def say(self, message: str) -> None:
        self.err.print(message, markup=False)

    def print(self, message: str) -> None:
        self.out.print(message, markup=False)

    def emit_json(self, obj: Any) -> None:
        self.out.print_json(json.dumps(obj, default=str, sort_keys=True)) if self.out.is_terminal else print(
            json.dumps(obj, default=str, sort_keys=True), flush=True
        )

    def abort(self, message: str, fix: str = "", code: int = EXIT_BAD_INPUT) -> NoReturn:
        raise LaunchError(message, fix, exit_code=code)

    @contextlib.contextmanager
    def spinner(self, message: str) -> Iterator[None]:
        if self.err.is_terminal:
            with self.err.status(message):
                yield
        else:
            yield
