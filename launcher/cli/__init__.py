"""The `nsa-launch` command root: wires one module per subcommand and nothing else."""

from __future__ import annotations

import click

from launcher import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsa-launch")
def cli() -> None:
    """Put an NSA training run on a GPU host (or this machine), watch it, and stop it.

    Exit codes: 0 ok, 1 runtime failure, 2 bad input.
    """


from launcher.cli.dashboard import dashboard  # noqa: E402

cli.add_command(dashboard)


def main() -> None:
    cli()
