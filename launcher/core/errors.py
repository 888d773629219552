"""The launcher's exceptions and their exit codes (0 ok, 1 runtime failure, 2 bad input, 130 Ctrl-C).

Owns the two error types every launcher module raises and the CLI turns into an exit code. A
`LaunchError` is bad input caught before anything starts (exit 2); a `RuntimeFailure` is something
that went wrong on a host or during a run (exit 1). Both carry a message that says what is wrong and
a `fix` that says what to do; remote failures also carry the command and the last lines of output
(invoke's UnexpectedExit), never the whole stream. This module must not import click or torch.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a command killed by SIGINT


class LaunchError(Exception):
    """Bad input: a profile, config, env var, host target or option that cannot work. Exit code 2."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, fix: str = "", *, exit_code: int | None = None):
        self.message = message
        self.fix = fix
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__(self.render())

    def render(self) -> str:
        return f"{self.message}\n  fix: {self.fix}" if self.fix else self.message


class RuntimeFailure(LaunchError):
    """A failure while doing the work (host unreachable, remote command failed, run died). Exit 1."""

    exit_code = EXIT_RUNTIME


class RemoteCommandError(RuntimeFailure):
    """A command on a host exited non-zero: the command, its exit code and the tail of its output."""

    def __init__(self, host: str, command: str, code: int, tail: str, fix: str = ""):
        self.host = host
        self.command = command
        self.code = code
        self.tail = tail
        lines = tail.rstrip().splitlines()[-20:]
        body = "\n".join(f"    {ln}" for ln in lines) or "    (no output)"
        super().__init__(f"on {host}: `{command}` exited with {code}; last lines:\n{body}", fix)
