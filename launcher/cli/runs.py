"""`nsa-launch runs`: the runs launched from this machine (the local registry), newest first, with each
run's state; `runs forget RUN` drops a record (the run's files on its host stay). The table fits the
terminal: run ids stay whole, and the run dir, nodes, pod, created, host and profile columns give way
in that order."""

from __future__ import annotations

import time

import click
from rich.table import Table
from rich.text import Text

from launcher.cli.app import Application
from launcher.core import format as fmt
from launcher.core.errors import LaunchError
from launcher.run.registry import all_runs, home, remove

LIVE = ("starting", "restarting", "running", "stalled")


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the records (with their state) as JSON.")
@click.option("--no-state", is_flag=True, help="Do not ask the hosts (no state column; no SSH at all).")
@click.pass_context
def runs(ctx: click.Context, as_json: bool, no_state: bool) -> None:
    """List remembered runs and their state (registry: $NSA_LAUNCH_HOME, default ~/.nsa-launch).

    The state comes from each run's host, one agent call per host; an unreachable host shows `lost`."""
    if ctx.invoked_subcommand is not None:
        return
    app: Application = ctx.obj
    records = all_runs()
    snaps: list[dict] = [{} for _ in records]
    if records and not no_state:
        from launcher.run.control import fetch_status

        snaps = fetch_status(records)
    states = [sn.get("state") for sn in snaps]
    pods = [fmt.pod_cost(sn) for sn in snaps]
    if as_json:
        keys = ("state", "pod_id", "price_hr", "cost_usd")
        app.emit_json([{**r.to_dict(), **{k: sn.get(k) for k in keys}} for r, sn in zip(records, snaps)])
        return
    if not records:
        app.say(f"no runs yet (registry {home()}); start one with `nsa-launch up`")
        return
    cols = ["run", "state", "profile", "host", "pod", "nodes", "created", "run dir"]
    shown = [c for c in cols if (c != "state" or not no_state) and (c != "pod" or any(pods))]
    now = time.time()
    rows = []
    for r, s, pod in zip(records, states, pods):
        created = Text(f"{fmt.local_time(r.created)} ({fmt.ago(now - r.created)})")
        row = [Text(r.run), Text(s or "-"), Text(r.profile), Text(r.host), Text(pod), Text(str(len(r.nodes)))]
        rows.append(dict(zip(cols, [*row, created, Text(r.run_dir)])))
    shown = fit(shown, rows, app.out.width)
    table = Table(*shown)
    for c in shown:
        table.columns[shown.index(c)].no_wrap = c != "run dir"
    for row in rows:
        table.add_row(*(row[c] for c in shown))
    app.out.print(table)


# What gives way first on a narrow terminal; run and state always stay, whole.
DROP_ORDER = ("run dir", "nodes", "pod", "created", "host", "profile")


def fit(shown: list[str], rows: list[dict[str, Text]], width: int) -> list[str]:
    """The columns of `shown` whose natural widths fit `width` (a box table: 3 cells a column + 1),
    dropping them in DROP_ORDER; the run dir may wrap, so it counts at most 30 cells."""

    def need(cols: list[str]) -> int:
        w = {c: max([len(c)] + [r[c].cell_len for r in rows]) for c in cols}
        if "run dir" in w:
            w["run dir"] = min(w["run dir"], 30)
        return sum(v + 3 for v in w.values()) + 1

    cols = list(shown)
    for drop in DROP_ORDER:
        if need(cols) <= width:
            break
        if drop in cols:
            cols.remove(drop)
    return cols


@runs.command()
@click.argument("run")
@click.option("--force", is_flag=True, help="Forget it even if it is still running on its host.")
@click.pass_obj
def forget(app: Application, run: str, force: bool) -> None:
    """Remove RUN from the local registry. Its run dir and checkpoints on the host are not touched."""
    from launcher.run.control import fetch_status, resolve_run

    rec = resolve_run(run)
    if not force:
        [st] = fetch_status([rec])
        if st["state"] in LIVE:
            raise LaunchError(
                f"run {rec.run} is {st['state']} on {rec.host}: forgetting it would leave it running unseen",
                f"stop it first (nsa-launch kill --run {rec.run}), or pass --force",
            )
    remove(rec.run)
    app.say(f"forgot {rec.run}; its files stay on {rec.host} at {rec.run_dir}")
