"""`nsa-launch profiles`: the profiles shipped in profiles/ (and, with --env, the env registry)."""

from __future__ import annotations

import click
from rich.table import Table

from launcher.cli.app import Application
from launcher.config.envspec import LEGACY, REGISTRY
from launcher.config.profiles import available, load_profile


@click.command()
@click.option("--env", "show_env", is_flag=True, help="List the environment variables a run may set.")
@click.pass_obj
def profiles(app: Application, show_env: bool) -> None:
    """List hardware profiles (or, with --env, known environment variables)."""
    if show_env:
        table = Table("name", "type", "allowed", "meaning")
        for v in sorted(REGISTRY.values(), key=lambda v: v.name):
            table.add_row(v.name, "secret" if v.secret else v.kind, ",".join(v.choices), v.help)
        for name, why in sorted(LEGACY.items()):
            table.add_row(name, "legacy", "-", f"not read here: {why}")
        app.out.print(table)
        return
    table = Table("profile", "device", "nodes x workers", "config", "description")
    for name in available():
        p = load_profile(name)
        table.add_row(name, p.device, f"{p.nodes} x {p.nproc_per_node}", p.config, p.description)
    app.out.print(table)
