"""An ordinary training step does not wait for the device: host syncs happen at log steps only.

Counted with the attention's list of syncing ops (bench/attention_launches.py: `.item()`, `nonzero`
and friends; the attention's custom ops are covered by its own none-found test) around the real
trainer, in process: a run of 2 steps and a run of
6 steps, each logging once at its end, make the same number of syncs, so the 4 extra ordinary steps
made none. Non-finite steps are skipped on the device and reported at the next log step.

Run: .venv/bin/pytest tests/unit/train/test_step_syncs.py
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

from nsa.train.cli import main

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("attention_launches", REPO / "bench" / "attention_launches.py")
launches = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launches)

SMALL = [
    "train.device=cpu", "train.seq_len=32", "train.batch_size=2", "model.n_layers=1", "train.eval_every=0",
    "train.save_final=false", "train.warmup_steps=0", "telemetry.tensorboard=false",
]  # fmt: skip


class SyncCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "aten" and func._opname in launches._SYNC:
            self.syncs.append(str(func))
        return func(*args, **(kwargs or {}))


def _syncs(tmp_path: Path, steps: int) -> int:
    sets = [*SMALL, f"train.steps={steps}", f"train.log_every={steps}"]
    argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--run-dir", str(tmp_path / f"r{steps}")]
    for s in sets:
        argv += ["--set", s]
    counter = SyncCounter()
    with counter:
        assert main(argv) == 0
    return len(counter.syncs)


def test_ordinary_steps_make_no_host_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    short, long = _syncs(tmp_path, 2), _syncs(tmp_path, 6)
    assert short == long, (short, long)
    assert short <= 12  # the first step's loss, the log step's one read, the NSA stats of that step


def test_a_nonfinite_step_is_skipped_on_device_and_stops_at_the_log_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.setenv("NSA_FAULT", "nan:step=2")
    run = tmp_path / "nan"
    argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--run-dir", str(run)]
    for s in [*SMALL, "train.steps=6", "train.log_every=3"]:
        argv += ["--set", s]
    assert main(argv) == 1
    err = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if '"error"' in x][-1]
    assert err["detail"]["error"] == "diverged" and err["step"] == 1
    assert (
        "not finite at step 2 (1 of the last 3 steps; their updates were skipped)" in err["detail"]["message"]
    )
    assert not (run / "metrics.jsonl").exists()  # stopped before logging the window that held it
