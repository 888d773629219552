"""The runs table: one row per run with coloured state, progress, rate, loss, ETA, heartbeat, elapsed.

Owns turning status dicts into cells and keeping the cursor on the same run across refreshes (rows
are keyed by run id and updated in place). It does no I/O.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from launcher import format as fmt

COLUMNS = (
    ("host", "host"),
    ("run", "run"),
    ("profile", "profile"),
    ("state", "state"),
    ("progress", "step / total"),
    ("tps", "tokens/s"),
    ("loss", "loss"),
    ("eta", "ETA"),
    ("hb", "heartbeat"),
    ("elapsed", "elapsed"),
)


def _run_cell(st: dict[str, Any]) -> Text:
    out = Text(str(st.get("run", "?")), style="bold")
    if st.get("synthetic"):  # a recording's hand-written row: its numbers were never measured
        out.append(" SYNTHETIC", style="bold black on yellow")
    return out


def row_cells(st: dict[str, Any], per_rank_heartbeat: bool) -> list[Any]:
    return [
        Text(" ".join(x for x in (str(st.get("host") or "local"), fmt.pod_cost(st)) if x)),
        _run_cell(st),
        Text(str(st.get("profile") or fmt.MISSING)),
        fmt.state_text(str(st.get("state", "")), fmt.state_label(st)),
        fmt.progress(st.get("step"), st.get("total_steps")),
        Text(fmt.rate(st.get("tokens_per_s")), justify="right"),
        Text(fmt.loss(st.get("loss")), justify="right"),
        Text(fmt.duration(st.get("eta_s")), justify="right"),
        fmt.heartbeat(st, per_rank_heartbeat),
        Text(fmt.duration(st.get("elapsed_s")), justify="right"),
    ]


class RunsTable(DataTable):
    DEFAULT_CSS = """
    RunsTable { height: auto; max-height: 12; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, statuses: list[dict[str, Any]], per_rank_heartbeat: bool = False) -> None:
        """Make the rows match `statuses` (in their order for new rows), keeping the cursor's run."""
        keep = self.selected_run()
        wanted = [str(st.get("run")) for st in statuses]
        for key in [k.value for k in self.rows]:
            if key not in wanted:
                self.remove_row(key)
        existing = {k.value for k in self.rows}
        for st, key in zip(statuses, wanted):
            cells = row_cells(st, per_rank_heartbeat)
            if key in existing:
                for (col, _), cell in zip(COLUMNS, cells):
                    self.update_cell(key, col, cell, update_width=True)
            else:
                self.add_row(*cells, key=key)
        if keep is not None and keep in wanted:
            self.move_cursor(row=self.get_row_index(keep))

    def selected_run(self) -> str | None:
        if self.row_count == 0:
            return None
        row = min(self.cursor_row, self.row_count - 1)
        return self.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value
