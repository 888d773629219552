"""Config and command-line checks a new user's first runs hit, all before torch starts (in-process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsa.train.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "configs" / "tiny.yaml"


def test_long_context_eval_without_held_out_text_is_refused_at_load() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(TINY, ["train.eval_every=0", "data.val_fraction=0", "eval.long_context_every=10"])
    assert e.value.key == "data.val_fraction" and "eval.long_context_every=10" in str(e.value)
    assert "Fix: set eval.long_context_every=0" in str(e.value)
    load_config(TINY, ["train.eval_every=0", "data.val_fraction=0"])  # nothing reads held-out text
