"""`nsa-launch runs`: the runs launched from this machine (the local registry), newest first."""

from __future__ import annotations

import time

import click
from rich.table import Table
from rich.text import Text

from launcher import format as fmt
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
    now = time.time()
    for r in records:
        table.add_row(
            Text(r.run),
            Text(r.profile),
            Text(r.host),
            str(len(r.nodes)),
            Text(f"{fmt.local_time(r.created)} ({fmt.ago(now - r.created)})", no_wrap=True),
            Text(r.run_dir),
        )
    app.out.print(table)
