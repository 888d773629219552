"""The `nsa-launch` command root: wires one module per subcommand and nothing else."""

from __future__ import annotations

import importlib
from typing import Any

import click

from launcher import __version__
from launcher.cli.app import Application
from launcher.core.errors import EXIT_INTERRUPTED, LaunchError

# name -> "module:attribute". Commands are imported when invoked, so `nsa-launch status` does not pay
# for pydantic, the config schema or Textual (a cold `status` is a command people run in loops).
COMMANDS = {
    "up": "launcher.cli.up:up",
    "status": "launcher.cli.status:status",
    "logs": "launcher.cli.logs:logs",
    "kill": "launcher.cli.kill:kill",
    "restart": "launcher.cli.restart:restart",
    "tunnel": "launcher.cli.tunnel:tunnel",
    "doctor": "launcher.cli.doctor:doctor",
    "profiles": "launcher.cli.profiles:profiles",
    "runs": "launcher.cli.runs:runs",
    "ssh-close": "launcher.cli.ssh_close:ssh_close",
    "dashboard": "launcher.cli.dashboard:dashboard",
    "pods": "launcher.cli.pods:pods",
    "pull": "launcher.cli.pull:pull",
    "watch": "launcher.cli.watch:watch",
}


class LauncherGroup(click.Group):
    """Loads commands lazily and turns a LaunchError from any command into its message on stderr and
    its exit code (1 or 2)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LaunchError as e:
            click.secho(f"error: {e.message}", fg="red", err=True)
            if e.fix:
                click.echo(f"  fix: {e.fix}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt as e:
            # Commands that leave something running say what keeps going and how to stop it; the
            # rest were stopped where they stood. Either way no "Aborted!" and exit 1.
            click.echo(str(e) or "interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        finally:
            from launcher.ssh.remote import close_all

            close_all()


@click.group(cls=LauncherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsa-launch")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Put an NSA training run on a GPU host (or this machine), watch it, and stop it.

    Exit codes: 0 ok, 1 runtime failure, 2 bad input, 130 interrupted (Ctrl-C).
    """
    ctx.obj = Application()


def main() -> None:
    cli()
