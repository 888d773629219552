"""`nsa-launch runs`: the runs launched from this machine (the local registry), newest first."""

from __future__ import annotations

import time

import click
from rich.table import Table

from launcher.app import Application
from launcher.registry import all_runs, home


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.pass_obj
def runs(app: Application, as_json: bool) -> None:
    """List remembered runs (registry: $NSA_LAUNCH_HOME, default ~/.nsa-launch)."""
    records = all_runs()
    if as_json:
        app.emit_json([r.to_dict() for r in records])
        return
    if not records:
        app.say(f"no runs yet (registry {home()}); start one with `nsa-launch up`")
        return
    table = Table("run", "profile", "host", "nodes", "created", "run dir")
    for r in records:
        table.add_row(
            r.run,
            r.profile,
            r.host,
            str(len(r.nodes)),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)),
            r.run_dir,
        )
    app.out.print(table)
