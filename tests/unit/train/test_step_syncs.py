"""An ordinary training step does not wait for the device: host syncs happen at log steps only.

Counted with the attention's list of syncing ops (bench/attention_launches.py: `.item()`, `nonzero`
and friends; the attention's custom ops are covered by its own none-found test) around the real
trainer, in process: a run of 2 steps and a run of
6 steps, each logging once at its end, make the same number of syncs, so the 4 extra ordinary steps
made none. Non-finite steps are skipped on the device and reported at the next log step. The same
on the meta device standing in for CUDA (nsa.train.hostsync, bench/step_host.py's `trainer_syncs`),
with the NSA triton ops bound there: it also sees `.tolist()` / `.cpu()` reads and the copies between
host and device that a CPU run hides.

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


_step_host_spec = importlib.util.spec_from_file_location("step_host", REPO / "bench" / "step_host.py")
step_host = importlib.util.module_from_spec(_step_host_spec)
_step_host_spec.loader.exec_module(step_host)


def test_host_syncs_sees_reads_copies_and_data_dependent_ops_on_the_stand_in_device() -> None:
    import torch

    from nsa.train.hostsync import HostSyncs

    m = torch.ones(4, device="meta")
    with HostSyncs() as spy:
        assert m.sum().item() == 0.0 and float(m[0]) == 0.0 and not bool(m[1]) and m.tolist() == [0.0] * 4
        assert torch.equal(m.cpu(), torch.zeros(4))
        torch.tensor([1.0, 2.0], device="meta")
        torch.ones(3).to("meta")
        torch.ones(3).to("meta", non_blocking=True)
        torch.empty(3, device="meta").copy_(torch.ones(3))
        torch.ones(3).sum().item()  # host-only work is not a sync
        (torch.ones(3) > 0).nonzero()
    kinds = {k.split(" @ ")[0]: v for k, v in spy.sites.items()}
    assert kinds == {
        "read .item()": 1, "read .float()": 1, "read .bool()": 1, "read .tolist()": 1, "read .cpu()": 1,
        "blocking copy to device (torch.tensor of Python data)": 1, "blocking copy to device (_to_copy)": 1,
        "async copy to device (_to_copy)": 1, "blocking copy to device (copy_)": 1,
    }, kinds  # fmt: skip
    assert all(k.endswith("test_host_syncs_sees_reads_copies_and_data_dependent_ops_on_the_stand_in_device")
               for k in spy.sites)  # fmt: skip
    assert sum(spy.syncs().values()) == 8


def test_a_call_site_skips_installed_frames_in_the_checkout_not_a_prefix_that_holds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frame of a venv inside the checkout (torch's, on CI) is not the call site; a python prefix
    above the checkout (/usr with it under /usr/src) hides nothing; "/w/nsa" is no prefix of "/w/nsa-x"."""
    import os

    from nsa.train import hostsync

    root = hostsync._ROOT
    venv = os.path.join(root, ".venv", "lib", "site-packages")
    libs = hostsync._lib_dirs(root, [venv, os.path.dirname(root), root + "-sibling"])
    assert libs == tuple(sorted([os.path.join(venv, ""), os.path.join(root + "-sibling", "")])), libs
    ns: dict = {}
    exec(compile("def installed(f):\n    return f()\n", os.path.join(venv, "lib.py"), "exec"), ns)
    monkeypatch.setattr(hostsync, "_LIBS", libs)
    site = ns["installed"](hostsync.call_site)
    assert site.startswith("tests/unit/train/test_step_syncs.py:"), site
    assert site.endswith(
        " test_a_call_site_skips_installed_frames_in_the_checkout_not_a_prefix_that_holds_it"
    )
    monkeypatch.setattr(hostsync, "_LIBS", ())  # as before the fix: the venv's frame is named
    assert ns["installed"](hostsync.call_site).startswith(".venv/lib/site-packages/lib.py:2 installed")


def test_a_triton_micro_batch_on_the_meta_device_waits_for_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real trainer with the NSA triton ops bound on the meta device (as on CUDA; their fake kernels
    run), 2 micro-batches a step: 2 and 4 steps logging once make the same syncs, all at the first step
    or the log step, and every copy a step makes to the device is asynchronous (pinned on CUDA). Unlike
    the CPU run above, this sees copies between host and device and `.tolist()` / `.cpu()` reads."""
    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = str(REPO / "configs" / "tiny.yaml")
    sets = ["train.grad_accum=2", "train.seq_len=64", "train.batch_size=2", "telemetry.nsa_stats_every=0"]
    short, long = (step_host.trainer_syncs(config, sets, n, str(tmp_path / f"r{n}")) for n in (2, 4))
    assert "attention: nsa (triton)" in capsys.readouterr().out
    assert short["rc"] == long["rc"] == 0
    assert short["syncs"] == long["syncs"], (short["sites"], long["sites"])
    where = {k.split(" @ ")[1].split(" ")[1] for k in long["sites"] if not k.startswith("async")}
    # boot (the model's move), the first step's loss, the log step's window and NSA stats: no _step
    assert where == {"_train", "_after_first_step", "read"}, long["sites"]
    step_copies = {k: v for k, v in long["sites"].items() if k.endswith(" _step")}
    assert set(step_copies) and all(k.startswith("async copy") for k in step_copies), step_copies
    assert sum(step_copies.values()) == 2 * 2 * 4  # x and y of each micro-batch
