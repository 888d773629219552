"""nsa.train.ckpt.fit_problem: the names and shapes a checkpoint must have to load into a model."""

from __future__ import annotations

import torch

from nsa.train.ckpt import fit_problem


def test_fit_problem_names_shapes_missing_and_unexpected_tensors() -> None:
    model = {"a.weight": torch.empty(4, 8), "b.weight": torch.empty(8), "c.bias": torch.empty(2)}
    assert fit_problem(dict(model), model) == ""
    saved = {"a.weight": torch.empty(4, 16), "b.weight": torch.empty(8), "gate": torch.empty(1)}
    assert fit_problem(saved, model) == (
        "a.weight [4, 16] in the checkpoint, [4, 8] here; c.bias missing from the checkpoint; "
        "gate in the checkpoint, not in this model"
    )
    many = {f"w{i}": torch.empty(i + 1) for i in range(5)}
    assert fit_problem({}, many).endswith("w2 missing from the checkpoint; and 2 more")
