"""The `nsa-launch` command root: wires one module per subcommand and nothing else."""

from __future__ import annotations

from typing import Any

import click

from launcher import __version__
from launcher.app import Application
from launcher.errors import LaunchError


class LauncherGroup(click.Group):
    """Turns a LaunchError from any command into its message on stderr and its exit code (1 or 2)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LaunchError as e:
            click.secho(f"error: {e.message}", fg="red", err=True)
            if e.fix:
                click.echo(f"  fix: {e.fix}", err=True)
            ctx.exit(e.exit_code)
        finally:
            from launcher.remote import close_all

            close_all()


@click.group(cls=LauncherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsa-launch")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Put an NSA training run on a GPU host (or this machine), watch it, and stop it.

    Exit codes: 0 ok, 1 runtime failure, 2 bad input.
    """
    ctx.obj = Application()


from launcher.cli.doctor import doctor  # noqa: E402
from launcher.cli.kill import kill  # noqa: E402
from launcher.cli.logs import logs  # noqa: E402
from launcher.cli.profiles import profiles  # noqa: E402
from launcher.cli.restart import restart  # noqa: E402
from launcher.cli.runs import runs  # noqa: E402
from launcher.cli.status import status  # noqa: E402
from launcher.cli.tunnel import tunnel  # noqa: E402
from launcher.cli.up import up  # noqa: E402

for _command in (up, status, logs, kill, restart, tunnel, doctor, profiles, runs):
    cli.add_command(_command)

from launcher.cli.dashboard import dashboard  # noqa: E402

cli.add_command(dashboard)


def main() -> None:
    cli()
