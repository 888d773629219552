"""Numbers written in config comments must match the model they describe (issue 13: the m7c
comment said ~78M while the banner and docs said 84.9M). Counted on the meta device: no memory."""

from __future__ import annotations

import re

import torch

from nsa.model import Transformer
from nsa.train.config import load_config
from tests.assets.trainrun import REPO


def test_m7c_comment_states_the_real_parameter_count() -> None:
    path = REPO / "configs" / "m7c_125m.yaml"
    head = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    stated = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)M\b", head.replace('"125M"', ""))]
    assert len(stated) >= 2, head
    cfg = load_config(path)
    counts = []
    for attention in ("nsa", "dense"):
        m = cfg.model.model_copy(update={"attention": attention})
        with torch.device("meta"):
            counts.append(Transformer(m, cfg.resolved_vocab_size()).num_params() / 1e6)
    assert [round(c, 1) for c in counts] == stated[:2], (counts, stated)
