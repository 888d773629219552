"""`nsa-launch logs`: the run's train.log; -f follows it (a new line shows within a second)."""

from __future__ import annotations

import click

from launcher.cli.app import Application
from launcher.run.control import resolve_run, stream_log


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option(
    "-n", "last_n", default=200, show_default=True, type=click.IntRange(min=0), help="Lines of history."
)
@click.pass_obj
def logs(app: Application, run: str | None, follow: bool, last_n: int) -> None:
    """Print (and follow) the run's log from node 0. Ctrl-C stops following (exit 130); the run
    keeps going."""
    rec = resolve_run(run)
    try:
        for line in stream_log(rec, follow=follow, last_n=last_n):
            click.echo(line)
    except KeyboardInterrupt:
        from launcher.cli.up import keeps_going

        raise KeyboardInterrupt(keeps_going(rec.run, rec.host, "stopped following the log")) from None
