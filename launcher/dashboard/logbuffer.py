"""Bounded log storage for the log pane: a fixed-capacity ring, rank tags and search matches.

This module owns how many log lines the dashboard keeps (a hard cap, so a run that prints a million
lines costs the same memory as one that printed ten thousand) and how a line's rank is read from
torchrun's `[rankN]:` / `[defaultN]:` prefixes. It is pure Python: no Textual, no I/O, no threads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# The launcher runs torchrun with --tee and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]:",
# so every worker line starts with `[rankN]:` (global rank); torchrun's default template gives
# `[defaultN]:` (local rank). Lines without a prefix come from torchrun itself or the launcher.
RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:")
# torch's own error handler already writes "[rank0]: Traceback ..."; tee'd, that becomes
# "[rank0]:[rank0]: Traceback ...". One prefix says it all.
_DOUBLE_PREFIX = re.compile(r"^(\[rank\d+\]:)\1")

# A single pathological line (a tensor repr, a progress bar without newlines) must not defeat the
# line cap, so each stored line is cut here; the cut is marked so nobody mistakes it for the line.
MAX_LINE_CHARS = 2000

# Terminal control in a log line (wandb's and tqdm's colours, OSC 8 links, a stray NUL) must not reach
# the terminal the dashboard draws on: an ESC went out as it was (`\x1b[34m` recoloured the rest of
# the screen, `\x1b[2J` would clear it) and a tab moved the cursor past the pane's border (qadash,
# 2026-11-27). Escape sequences are dropped, tabs become spaces, any other control character shows as
# U+FFFD, so the line keeps its text and its width is what it shows.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, clears
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks (ended by BEL or ST)
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROLS_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, newlines: bool = False) -> str:
    """`text` with escape sequences removed, tabs expanded and other control characters as U+FFFD
    (`newlines`: line breaks kept, for a notification's several lines). Every widget that shows run
    text (log, events, notifications, top bar, GPU processes) puts it through this."""
    if text.isprintable():  # the common case: nothing to do
        return text
    text = _ESCAPES.sub("", text)
    if "\t" in text:
        text = text.expandtabs(8)
    return (_CONTROLS_BUT_NEWLINE if newlines else _CONTROLS).sub("\ufffd", text)


def line_rank(line: str) -> int | None:
    """The rank a torchrun-prefixed line came from, or None for an untagged line."""
    m = RANK_PREFIX.match(line)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class LogLine:
    text: str
    rank: int | None


def make_line(raw: str) -> LogLine:
    text = _DOUBLE_PREFIX.sub(r"\1", printable(raw.rstrip("\r\n")), count=1)
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + " …[cut]"
    return LogLine(text, line_rank(text))


class LogRing:
    """A fixed-capacity ring of items with O(1) append and O(1) indexing from the oldest kept item.

    `dropped` counts items evicted from the front since creation; a paused view uses it to keep the
    same lines on screen while the front of the ring moves.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"LogRing capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._buf: list[LogLine | None] = [None] * capacity
        self._start = 0
        self._len = 0
        self.dropped = 0

    def __len__(self) -> int:
        return self._len

    def append(self, item: LogLine) -> None:
        if self._len < self.capacity:
            self._buf[(self._start + self._len) % self.capacity] = item
            self._len += 1
        else:
            self._buf[self._start] = item
            self._start = (self._start + 1) % self.capacity
            self.dropped += 1

    def extend(self, items: Iterable[LogLine]) -> None:
        for it in items:
            self.append(it)

    def __getitem__(self, i: int) -> LogLine:
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(i)
        item = self._buf[(self._start + i) % self.capacity]
        assert item is not None
        return item

    def __iter__(self) -> Iterator[LogLine]:
        for i in range(self._len):
            yield self[i]

    def clear(self) -> None:
        self._buf = [None] * self.capacity
        self._start = 0
        self._len = 0


def rank_visible(line: LogLine, rank_filter: int | None) -> bool:
    """Whether `line` shows under a rank filter. Untagged lines (torchrun's own messages: restarts,
    `ChildFailedError`, exit codes) always show, because they explain what happened to every rank."""
    return rank_filter is None or line.rank is None or line.rank == rank_filter


def find_spans(text: str, needle: str) -> list[tuple[int, int]]:
    """Case-insensitive, non-overlapping (start, end) spans of `needle` in `text`."""
    if not needle:
        return []
    hay, pat = text.lower(), needle.lower()
    spans, i = [], hay.find(pat)
    while i >= 0:
        spans.append((i, i + len(pat)))
        i = hay.find(pat, i + len(pat))
    return spans
