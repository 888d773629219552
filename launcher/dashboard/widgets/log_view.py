"""The log pane: a virtual, bounded view of one run's train.log with follow, rank filter and search.

Owns what is on screen of the log: only the visible rows are rendered (line API), storage is a
fixed-capacity `LogRing` (memory does not grow with the log), and search highlights matches without
filtering. Long lines wrap (the default) or stay whole and scroll sideways (`w` toggles): in wrap
mode a log line takes several screen rows, mapped through a prefix sum that is rebuilt only when the
lines or the width change. It receives lines from the screen; it never reads a file or a socket.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate

from rich.cells import cell_len, get_character_cell_size
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from launcher.dashboard.logbuffer import RANK_PREFIX, LogRing, find_spans, make_line, rank_visible

DEFAULT_CAPACITY = 10_000


class LogView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LogView { height: 1fr; border: round $primary-darken-2; background: $surface; }
    LogView:focus { border: round $accent; }
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, **kwargs) -> None:
        super().__init__(**kwargs)
        self.ring = LogRing(capacity)
        self.view = self.ring
        self.rank_filter: int | None = None
        self.ranks_seen: set[int] = set()
        self.search = ""
        self.match_index: int | None = None  # index into `view` of the current match
        self.follow = True
        self.run_id: str | None = None
        self.ended: str | None = None
        self.wrap = True
        self._layout_key: tuple = ()
        self._generation = 0  # bumped whenever the view's lines are replaced, not only extended
        self._starts: list[int] = [0]  # screen row where each line of `view` starts (+ the total)
        self._max_len = 0
        self._update_title()

    # --- content ----------------------------------------------------------------------------
    def reset(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.ring.clear()
        self._generation += 1
        self.view = self.ring
        self.rank_filter = None  # ranks differ between runs; a kept filter could hide everything
        self.ranks_seen.clear()
        self.match_index = None
        self.ended = None
        self._resize()
        self.scroll_to(0, 0, animate=False)
        self._update_title()
        self.refresh()

    def append_lines(self, raw: Iterable[str]) -> None:
        lines = [make_line(r) for r in raw]
        if not lines:
            return
        for ln in lines:
            if ln.rank is not None:
                self.ranks_seen.add(ln.rank)
        before = self.view.dropped
        top = self.line_at(int(self.scroll_y))
        self.ring.extend(lines)
        if self.view is not self.ring:
            self.view.extend(ln for ln in lines if rank_visible(ln, self.rank_filter))
        dropped = self.view.dropped - before
        if self.match_index is not None:
            self.match_index = self.match_index - dropped if self.match_index >= dropped else None
        self._resize()
        if self.follow:
            self.scroll_end(animate=False, x_axis=False)
        elif dropped:
            # Keep the same lines under the reader's eyes while the ring's front moves on.
            self.scroll_to(y=self.row_of(max(0, top - dropped)), animate=False)
        self.refresh()

    def mark_ended(self, why: str) -> None:
        self.ended = why
        self._update_title()

    # --- modes ------------------------------------------------------------------------------
    def set_follow(self, on: bool) -> None:
        self.follow = on
        if on:
            self.scroll_end(animate=False)
        self._update_title()

    def toggle_wrap(self) -> bool:
        """Wrap long lines / keep them whole and scroll sideways; the reader's line stays in view."""
        line = self.line_at(int(self.scroll_y))
        self.wrap = not self.wrap
        self._resize()
        if self.follow:
            self.scroll_end(animate=False)
        else:
            self.scroll_to(x=0, y=self.row_of(line), animate=False)
        self._update_title()
        self.refresh()
        return self.wrap

    def cycle_rank_filter(self) -> int | None:
        """all -> rank0 -> rank1 ... -> all, over the ranks seen so far."""
        ranks = sorted(self.ranks_seen)
        if not ranks:
            nxt = None
        elif self.rank_filter is None:
            nxt = ranks[0]
        else:
            later = [r for r in ranks if r > self.rank_filter]
            nxt = later[0] if later else None
        self.set_rank_filter(nxt)
        return nxt

    def set_rank_filter(self, rank: int | None) -> None:
        self.rank_filter = rank
        self._generation += 1
        if rank is None:
            self.view = self.ring
        else:
            view = LogRing(self.ring.capacity)
            view.extend(ln for ln in self.ring if rank_visible(ln, rank))
            self.view = view
        self.match_index = None
        self._resize()
        if self.follow:
            self.scroll_end(animate=False)
        self._update_title()
        self.refresh()

    def set_search(self, term: str) -> bool:
        """Highlight `term`; jump to its newest occurrence (pausing follow). False if absent."""
        self.search = term
        self.match_index = None
        found = bool(term) and self.find_match(-1, start=len(self.view))
        self._update_title()
        self.refresh()
        return found

    def find_match(self, direction: int, start: int | None = None) -> bool:
        """Move to the next (+1) or previous (-1) line containing the search term."""
        if not self.search:
            return False
        if start is None:
            start = self.match_index if self.match_index is not None else len(self.view) - 1
        i = start + direction
        needle = self.search.lower()
        while 0 <= i < len(self.view):
            if needle in self.view[i].text.lower():
                self.match_index = i
                self.follow = False
                half = self.scrollable_content_region.height // 2
                self.scroll_to(y=max(0, self.row_of(i) - half), animate=False)
                self._update_title()
                self.refresh()
                return True
            i += direction
        return False

    # --- rendering --------------------------------------------------------------------------
    def _layout(self) -> list[int]:
        """Start row of every line of `view` (and the total rows last), for the current width."""
        width = max(1, self.scrollable_content_region.width)
        key = (width, self.wrap, self._generation, id(self.view), len(self.view), self.view.dropped)
        if key != self._layout_key:
            lens = [_cells(ln.text) for ln in self.view]
            self._max_len = max(lens, default=0)
            if self.wrap:
                rows = (
                    max(1, -(-n // width)) if n == len(ln.text) else len(row_offsets(ln.text, width))
                    for n, ln in zip(lens, self.view)
                )
                self._starts = [0, *accumulate(rows)]
            else:
                self._starts = list(range(len(lens) + 1))
            self._layout_key = key
            if self.virtual_size.height != self._starts[-1]:
                # The width changed without a resize (a scrollbar came or went): the rows did too.
                self.call_later(self._resize)
        return self._starts

    def row_of(self, line: int) -> int:
        """The screen row (in the scrollable content) where line `line` of the view starts."""
        starts = self._layout()
        return starts[max(0, min(line, len(starts) - 1))]

    def line_at(self, row: int) -> int:
        """The index into the view of the line shown on content row `row`."""
        starts = self._layout()
        return max(0, min(bisect_right(starts, row) - 1, len(self.view) - 1))

    def _resize(self) -> None:
        starts = self._layout()
        # Wrapped, nothing is wider than the pane: never a sideways scrollbar, whatever the width.
        self.virtual_size = Size(1 if self.wrap else max(1, self._max_len), starts[-1])
        if self.follow:
            self.scroll_end(animate=False, x_axis=False)

    def on_resize(self) -> None:
        self._resize()
        if self.follow:  # a new width re-wraps the lines: stay on the tail
            self.scroll_end(animate=False)

    def _update_title(self) -> None:
        parts = [f"log {self.run_id}" if self.run_id else "log"]
        parts.append("follow" if self.follow else "paused")
        parts.append("all ranks" if self.rank_filter is None else f"rank {self.rank_filter}")
        parts.append("wrap" if self.wrap else "no wrap")
        if self.search:
            parts.append(f"/{self.search}")
        if self.ended:
            parts.append(self.ended)
        self.border_title = " · ".join(parts)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        row = self.scroll_offset.y + y
        starts = self._layout()
        if row >= starts[-1] or not len(self.view):
            return Strip.blank(width, self.rich_style)
        idx = self.line_at(row)
        line = self.view[idx]
        text = Text(line.text, no_wrap=True, end="")
        if line.rank is not None:
            m = RANK_PREFIX.match(line.text)
            if m:
                text.stylize("bold cyan", 0, m.end())
        if self.search:
            current = idx == self.match_index
            for a, b in find_spans(line.text, self.search):
                text.stylize("bold black on orange1" if current else "black on yellow", a, b)
        if self.wrap:
            part = row - starts[idx]
            if len(line.text) == _cells(line.text):
                text = text[part * width : (part + 1) * width]
            else:  # wide characters (CJK, emoji) take two cells: cut rows by cells, not characters
                cuts = [*row_offsets(line.text, width), len(line.text)]
                text = text[cuts[min(part, len(cuts) - 2)] : cuts[min(part + 1, len(cuts) - 1)]]
            x = 0
        else:
            x = self.scroll_offset.x
        segments = list(text.render(self.app.console))
        return Strip(segments).crop_extend(x, x + width, self.rich_style)


def _cells(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def row_offsets(text: str, width: int) -> list[int]:
    """Where each wrapped row of `text` starts (character offsets), rows at most `width` cells wide
    (a wide character that would straddle the edge starts the next row; one always fits)."""
    starts, used = [0], 0
    for i, ch in enumerate(text):
        w = get_character_cell_size(ch)
        if used + w > width and used:
            starts.append(i)
            used = 0
        used += w
    return starts
