"""The key footer: Textual's Footer, but a key that does not fit whole is left out.

Textual's footer cuts the last key that does not fit mid-word and draws the `^p palette` key over
it: at 80 columns the dashboard's footer read `f follo▏^p palettem`. Keys are shown in the screen's
binding order (`?` and `q` first), whole or not at all; `?` lists every key.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


def key_width(key: FooterKey, compact: bool) -> int:
    """Columns one key takes: ` k kill ` (compact: `k kill `), as FooterKey renders it."""
    return len(key.key_display) + len(key.description) + (2 if compact else 3)


class KeysFooter(Footer):
    def compose(self) -> ComposeResult:
        keys = list(super().compose())
        width = self.size.width or self.app.size.width
        palette = [k for k in keys if isinstance(k, FooterKey) and k.has_class("-command-palette")]
        used = sum(key_width(k, self.compact) + 1 for k in palette)  # + its `▏` separator
        for key in keys:
            if key in palette:
                continue
            used += key_width(key, self.compact) if isinstance(key, FooterKey) else 0  # no key groups here
            if used > width:
                break
            yield key
        yield from palette

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self.recompose)  # what fits depends on the width
