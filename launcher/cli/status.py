"""`nsa-launch status`: one snapshot of a run (or all runs) from the host agents.

A cold `status` is a command people run in loops, so this module imports only what the answer
needs: rich only for the table (not for --json), and over SSH the shared connection of
launcher/ssh/openssh.py instead of paramiko. Exit 1 when a run is `lost` (its host did not answer),
after printing every snapshot. The table fits the terminal: columns a narrow terminal cannot hold
are dropped, least useful first (`status_columns`), and numbers are written by launcher/core/format.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from launcher.cli.app import Application
from launcher.core.errors import EXIT_RUNTIME
from launcher.run.control import fetch_status, live_tunnel, resolve_run
from launcher.run.registry import all_runs, home

if TYPE_CHECKING:
    from rich.console import Console


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option("--all", "all_runs_", is_flag=True, help="Every run launched from this machine.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, in a list (raw numbers).")
@click.pass_context
def status(ctx: click.Context, run: str | None, all_runs_: bool, as_json: bool) -> None:
    """State, step, loss, tokens/s, ETA, last heartbeat and GPUs of a run.

    The table fits the terminal's width (narrow terminals drop the host, elapsed, heartbeat and ETA columns
    first); --json has every field with raw numbers. Exit 1 if a run is lost (its host did not
    answer, or its run dir is gone), naming the mirror's newest checkpoint and the command that
    resumes the run from it (watch for a rented pod, restart --host NEW for a host you rent; pull
    while the mirror is empty). With no runs yet: exit 0 (--json prints []).
    """
    app: Application = ctx.obj
    if run is None and not all_runs():
        # Nothing launched yet is not an error: a script's loop over `status --json` reads [].
        if as_json:
            app.emit_json([])
        else:
            app.say(
                f"no runs yet (registry {home()}): nsa-launch up --profile cpu starts one on this machine"
            )
        return
    records = all_runs() if all_runs_ else [resolve_run(run)]
    snaps = fetch_status(records)
    for s in snaps:  # an `nsa-launch tunnel` that answers now; a dead one is never shown
        s["tunnel"] = live_tunnel(str(s["run"]))
    if as_json:
        app.emit_json(snaps)
    else:
        print_status(app.out, snaps)
    lost = [s for s in snaps if s["state"] == "lost"]
    for s in lost:
        from launcher.core import format as fmt

        click.secho(f"error: run {s['run']} is lost: {s['error']}", fg="red", err=True)
        if s.get("last_state") in ("finished", "failed", "killed"):
            click.echo(f"  {fmt.lost_detail(s)}: it had ended there, so nothing of it runs", err=True)
        else:
            click.echo(
                f"  {fmt.lost_detail(s)}; the run may go on on its host. Nothing here retries: "
                f"`nsa-launch watch --run {s['run']}` (or the dashboard) keeps the mirror",
                err=True,
            )
        line = fmt.resume_line(s)
        if line and not s.get("recovery"):  # a replacement under way says what it does in the error
            click.echo(f"  {line}", err=True)
    if lost:
        ctx.exit(EXIT_RUNTIME)


# (key, header, priority): the lowest priority goes first when the terminal is too narrow.
COLUMNS = (
    ("run", "run", 9),
    ("state", "state", 9),
    ("step", "step", 8),
    ("loss", "loss", 7),
    ("tps", "tok/s", 6),
    ("eta", "ETA", 5),
    ("beat", "heartbeat", 4),
    ("elapsed", "elapsed", 3),
    ("host", "host", 2),
)
RUN_MIN = 24  # default run ids are at most 24 characters (launch/plan.py): whole at 80 columns
_PAD = 3  # per column: one space of padding each side and a one-space divider (none at the edges)


def status_cells(s: dict[str, Any]) -> dict[str, Any]:
    from rich.text import Text

    from launcher.core import format as fmt

    state = str(s.get("state") or "?")
    return {
        "run": Text(str(s.get("run")), style="bold", overflow="fold"),
        "state": fmt.state_text(state, fmt.state_label(s)),
        "step": Text(fmt.step_total(s.get("step"), s.get("total_steps")), justify="right"),
        "loss": Text(fmt.loss(s.get("loss")), justify="right"),
        "tps": Text(fmt.rate(s.get("tokens_per_s")), justify="right"),
        "eta": Text(
            fmt.duration(s.get("eta_s")) if state not in fmt.ENDED_STATES else fmt.MISSING, justify="right"
        ),
        "beat": Text(fmt.newest_heartbeat(s), justify="right"),
        "elapsed": Text(fmt.duration(s.get("elapsed_s")), justify="right"),
        "host": Text(str(s.get("host") or "local")),
    }


def status_columns(rows: list[dict[str, Any]], width: int) -> list[tuple[str, str]]:
    """The columns that fit `width`, in display order: drop the lowest priority until they fit.
    A long run id folds onto a second line (down to RUN_MIN columns) before a column is dropped;
    nothing else is cut."""
    widths = {key: max([len(header)] + [r[key].cell_len for r in rows]) + _PAD for key, header, _ in COLUMNS}
    widths["run"] = min(widths["run"], RUN_MIN + _PAD)
    keep = list(COLUMNS)
    for key, _, _ in sorted(COLUMNS, key=lambda c: c[2]):
        # n columns take sum(w + 3) - 3: no padding at the two edges, no divider after the last
        if sum(widths[k] for k, _, _ in keep) - 3 <= width or key in ("run", "state", "step"):
            break
        keep = [c for c in keep if c[0] != key]
    return [(k, h) for k, h, _ in keep]


def print_status(console: Console, snaps: list[dict[str, Any]]) -> None:
    """The status table (fitted to `console.width`), then each run's error and GPUs as lines."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from launcher.core import format as fmt

    rows = [status_cells(s) for s in snaps]
    cols = status_columns(rows, console.width)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for key, header in cols:
        table.add_column(header, justify="right" if rows and rows[0][key].justify == "right" else "left",
                         no_wrap=key != "run", overflow="fold" if key == "run" else "ellipsis")  # fmt: skip
    for r in rows:
        table.add_row(*(r[k] for k, _ in cols))
    console.print(table)
    shown = {k for k, _ in cols}
    for s in snaps:
        lines = []
        if "host" not in shown and s.get("host") not in (None, "local"):
            lines.append(Text(f"  on {s['host']}", style="dim"))
        if s.get("error") and s.get("state") != "lost":  # a lost run's error follows on stderr
            lines.append(Text(f"  {s['error']}", style="red"))
        if s.get("recovery") and s.get("state") != "lost":
            lines.append(Text(f"  {s['recovery']['text']}", style="yellow"))
        r = s.get("restarts")
        if r and (r["count"] or r["stopped"]):
            lines.append(Text(f"  restarts {r['count']}/{fmt.MISSING if r['max'] is None else r['max']}"))
            for c in r["causes"]:
                lines.append(Text(f"    restart {c['attempt']} after step {c['step']}: {c['cause']}"))
            if r["stopped"]:
                lines.append(Text(f"    not restarted: {r['stopped']}"))
        if s.get("tunnel"):
            lines.append(Text(f"  TensorBoard {s['tunnel']} (nsa-launch tunnel, answering)"))
        if s.get("pod_id"):
            price = f"${s['price_hr']:.2f}/h" if s.get("price_hr") is not None else "$?/h"
            cost = f"${s['cost_usd']:.2f}" if s.get("cost_usd") is not None else "?"
            if s.get("pod_terminated"):  # no longer billing: the cost is final
                lines.append(Text(f"  pod {s['pod_id']} terminated, cost {cost}"))
            else:
                lines.append(Text(f"  pod {s['pod_id']} {price}, cost so far {cost}"))
        for g in s.get("gpus") or []:
            name = str(g.get("name") or "").removeprefix("NVIDIA ")
            lines.append(
                Text(
                    f"  gpu{g.get('index')} {name}  {fmt.unit(g.get('util_pct'), '.0f', '%')}  "
                    f"{fmt.mib(g.get('mem_used_mb'), g.get('mem_total_mb'))}  "
                    f"{fmt.unit(g.get('temp_c'), '.0f', '°C')}  {fmt.unit(g.get('power_w'), '.0f', 'W')}"
                )
            )
        if lines:
            console.print(Text(f"{s.get('run')}:", style="bold"))
            for line in lines:
                console.print(line)
