"""`nsa-launch status`: one snapshot of a run (or all runs) from the host agents.

A cold `status` is a command people run in loops, so this module imports only what the answer
needs: rich only for the table (not for --json), and over SSH the shared connection of
launcher/ssh/openssh.py instead of paramiko. Exit 1 when a run is `lost` (its host did not answer),
after printing every snapshot.
"""

from __future__ import annotations

import click

from launcher.app import Application
from launcher.control import fetch_status, resolve_run
from launcher.errors import EXIT_RUNTIME
from launcher.registry import all_runs


def _fmt(v: object, nd: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:.{nd}g}" if isinstance(v, float) else str(v)


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option("--all", "all_runs_", is_flag=True, help="Every run launched from this machine.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, in a list.")
@click.pass_context
def status(ctx: click.Context, run: str | None, all_runs_: bool, as_json: bool) -> None:
    """State, step, loss, tokens/s, heartbeat ages and GPUs of a run.

    Exit 1 if a run is lost (its host did not answer, or its run dir is gone).
    """
    app: Application = ctx.obj
    records = all_runs() if all_runs_ else [resolve_run(run)]
    snaps = fetch_status(records)
    if as_json:
        app.emit_json(snaps)
    else:
        _print_table(app, snaps)
    lost = [s for s in snaps if s["state"] == "lost"]
    for s in lost:
        click.secho(f"error: run {s['run']} is lost: {s['error']}", fg="red", err=True)
    if lost:
        ctx.exit(EXIT_RUNTIME)


def _print_table(app: Application, snaps: list[dict]) -> None:
    from rich.table import Table
    from rich.text import Text

    def cell(v: object) -> Text:  # never markup: errors carry gloo/NCCL text like "[/path.cpp:553]"
        return Text(str(v))

    table = Table(
        "run", "host", "state", "step", "loss", "tok/s", "eta s", "heartbeat age s", "exit", "error"
    )
    for s in snaps:
        ages = " ".join(f"r{r}:{a:.1f}" for r, a in s["heartbeat_age_s"].items()) or "-"
        row = [
            s["run"],
            s["host"],
            s["state"],
            f"{_fmt(s['step'])}/{_fmt(s['total_steps'])}",
            _fmt(s["loss"]),
            _fmt(s["tokens_per_s"], 4),
            _fmt(s["eta_s"]),
            ages,
            _fmt(s["exit_code"]),
            "(see below)" if s["state"] == "lost" else s["error"] or "",
        ]
        table.add_row(*(cell(v) for v in row))
    app.out.print(table)
    for s in snaps:
        r = s.get("restarts")
        if r and (r["count"] or r["stopped"]):
            app.print(f"  {s['run']}: restarts {r['count']}/{_fmt(r['max'])}")
            for c in r["causes"]:
                app.print(f"    restart {c['attempt']} after step {c['step']}: {c['cause']}")
            if r["stopped"]:
                app.print(f"    not restarted: {r['stopped']}")
        if s.get("pod_id"):
            price = f"${s['price_hr']:.2f}/h" if s.get("price_hr") is not None else "$?/h"
            cost = f"${s['cost_usd']:.2f}" if s.get("cost_usd") is not None else "?"
            app.print(f"  {s['run']}: pod {s['pod_id']} {price}, cost so far {cost}")
        for g in s["gpus"]:
            app.print(
                f"  gpu{g['index']} {g['name']}: {_fmt(g['util_pct'])}% {_fmt(g['mem_used_mb'])}/"
                f"{_fmt(g['mem_total_mb'])} MiB {_fmt(g['temp_c'])}C {_fmt(g['power_w'])}W"
            )
