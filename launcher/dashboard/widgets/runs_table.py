"""The runs table: one row per run with coloured state, progress, rate, loss, ETA, heartbeat, elapsed.

Owns turning status dicts into cells, fitting them to the terminal's width and keeping the cursor on
the same run across refreshes (rows are keyed by run id and updated in place). Run ids are never cut:
when the columns do not fit, whole columns go, in the order of `DROP_ORDER` (docs/dashboard.md), so
run, state, step and loss stay at 80 columns. It does no I/O.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from launcher.core import format as fmt

COLUMNS = (
    ("host", "host"),
    ("run", "run"),
    ("profile", "profile"),
    ("state", "state"),
    ("progress", "step"),
    ("tps", "tok/s"),
    ("loss", "loss"),
    ("eta", "ETA"),
    ("hb", "beat"),
    ("elapsed", "elapsed"),
)
# What gives way first when the table is wider than the screen: the progress bar (the step count
# stays), then whole columns. run, state, step (progress) and loss are never dropped.
DROP_ORDER = ("bar", "profile", "host", "eta", "elapsed", "hb", "tps")
KEPT = ("run", "state", "progress", "loss")
CELL_PADDING = 1  # DataTable's default, on each side of a cell
SCROLLBAR = 2  # a vertical scrollbar appears past this many rows (max-height 12 - header - border)
ROWS_WITHOUT_SCROLLBAR = 9


def _run_cell(st: dict[str, Any]) -> Text:
    out = Text(str(st.get("run", "?")), style="bold", no_wrap=True)
    if st.get("synthetic"):  # a recording's hand-written row: its numbers were never measured
        out.append(" SYNTHETIC", style="bold black on yellow")
    return out


def all_cells(st: dict[str, Any], per_rank_heartbeat: bool, bar: bool = True) -> dict[str, Text]:
    """Every column's cell for one status; `bar=False` writes progress as the bare step/total."""
    progress = (
        fmt.progress(st.get("step"), st.get("total_steps"))
        if bar
        else Text(fmt.step_total(st.get("step"), st.get("total_steps")))
    )
    return {
        "host": Text(" ".join(x for x in (str(st.get("host") or "local"), fmt.pod_cost(st)) if x)),
        "run": _run_cell(st),
        "profile": Text(str(st.get("profile") or fmt.MISSING)),
        "state": fmt.state_text(str(st.get("state", "")), fmt.state_label(st)),
        "progress": progress,
        "tps": Text(fmt.rate(st.get("tokens_per_s")), justify="right"),
        "loss": Text(fmt.loss(st.get("loss")), justify="right"),
        "eta": Text(fmt.duration(st.get("eta_s")), justify="right"),
        "hb": fmt.heartbeat(st, per_rank_heartbeat),
        "elapsed": Text(fmt.duration(st.get("elapsed_s")), justify="right"),
    }


def fit_columns(
    statuses: list[dict[str, Any]], width: int, per_rank_heartbeat: bool = False
) -> tuple[tuple[str, ...], bool]:
    """The columns (in display order) that fit `width` cells, and whether the progress bar does.

    Drops in `DROP_ORDER` until the natural widths (widest cell or header, plus padding) fit; the
    `KEPT` columns stay even when they alone are wider than `width` (the table then scrolls)."""
    keys = [k for k, _ in COLUMNS]
    labels = dict(COLUMNS)
    widths = {
        bar: {k: len(labels[k]) for k in keys} for bar in (True, False)
    }  # header widths, then the widest cell
    for st in statuses:
        for bar in (True, False):
            for k, cell in all_cells(st, per_rank_heartbeat, bar).items():
                widths[bar][k] = max(widths[bar][k], cell.cell_len)
    shown = list(keys)
    bar = True
    for drop in (None, *DROP_ORDER):
        if drop == "bar":
            bar = False
        elif drop is not None:
            shown.remove(drop)
        if sum(widths[bar][k] + 2 * CELL_PADDING for k in shown) <= width:
            break
    return tuple(shown), bar


class RunsTable(DataTable):
    DEFAULT_CSS = """
    RunsTable { height: auto; max-height: 12; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.statuses: list[dict[str, Any]] = []
        self.per_rank_heartbeat = False
        self.shown: tuple[str, ...] = ()
        self.bar = True

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True

    def on_resize(self) -> None:
        self.show(self.statuses, self.per_rank_heartbeat)

    def _available(self) -> int:
        width = self.size.width
        if len(self.statuses) > ROWS_WITHOUT_SCROLLBAR:
            width -= SCROLLBAR
        return width

    def show(self, statuses: list[dict[str, Any]], per_rank_heartbeat: bool = False) -> None:
        """Make the rows match `statuses`, in their order, keeping the cursor's run."""
        self.statuses, self.per_rank_heartbeat = list(statuses), per_rank_heartbeat
        keep = self.selected_run()
        shown, bar = fit_columns(self.statuses, self._available(), per_rank_heartbeat)
        wanted = [str(st.get("run")) for st in self.statuses]
        kept = [k.value for k in self.rows if k.value in wanted]
        if kept != [w for w in wanted if w in kept] or (len(wanted) > len(kept) and kept):
            # A new run (or a new order): rows are added at the bottom, so rebuild in the statuses'
            # order, newest first: a run started while the dashboard was open sat below the four
            # rows an 80x24 screen shows, out of sight (qadash, 2026-11-27).
            self.clear()
        if (shown, bar) != (self.shown, self.bar) or not self.columns:
            # A different set of columns: rebuild (cheap: a handful of rows).
            self.clear(columns=True)
            self.shown, self.bar = shown, bar
            labels = dict(COLUMNS)
            for key in shown:
                self.add_column(labels[key], key=key)
        for key in [k.value for k in self.rows]:
            if key not in wanted:
                self.remove_row(key)
        existing = {k.value for k in self.rows}
        for st, key in zip(self.statuses, wanted):
            cells = all_cells(st, per_rank_heartbeat, bar)
            if key in existing:
                for col in shown:
                    self.update_cell(key, col, cells[col], update_width=True)
            else:
                self.add_row(*(cells[col] for col in shown), key=key)
        if keep is not None and keep in wanted:
            self.move_cursor(row=self.get_row_index(keep))

    def selected_run(self) -> str | None:
        if self.row_count == 0:
            return None
        row = min(self.cursor_row, self.row_count - 1)
        return self.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value
