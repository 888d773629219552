"""Gradient accumulation under CUDA graphs: the trainer's own .grad buffers, and bench/graphs_check.py.

CUDA graphs cannot run here (CPU). What can: autograd's AccumulateGrad against a backward that returns
its gradient in one buffer rewritten by every call and marked as a cached tensor, as cudagraph trees
hand out graph-pool outputs (the mechanism of pytorch/pytorch#169545); the trainer's own-buffer path
with its flag forced (eager, CPU) against the ordinary path; the GPU check's comparison and its exit 2.

Run: .venv/bin/pytest tests/unit/train/test_graphs.py
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch

from nsa.train.parallelize import own_grads

REPO = Path(__file__).resolve().parents[3]


class _Replayed(torch.autograd.Function):
    """x * w whose backward writes w's gradient into ONE buffer, rewritten by every call, and returns
    it: a CUDA graph replay's output (cudagraph trees also register it as a cached tensor, which lets
    AccumulateGrad take it as .grad without a copy)."""

    buf: torch.Tensor

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * w

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (x,) = ctx.saved_tensors
        _Replayed.buf.copy_((g * x).sum(0))
        return None, _Replayed.buf


def _accumulate(owned: bool) -> torch.Tensor:
    w = torch.nn.Parameter(torch.ones(3))
    torch._C._set_cached_tensors_enabled(True)
    _Replayed.buf = torch.empty(3)
    torch._C._add_cached_tensor(_Replayed.buf)
    try:
        if owned:
            own_grads([w])
        for v in (1.0, 5.0, 2.0):  # three micro-batches; the true sum of gradients is 2 * 8 = 16
            _Replayed.apply(torch.full((2, 3), v), w).sum().backward()
    finally:
        torch._C._remove_cached_tensor(_Replayed.buf)
        torch._C._set_cached_tensors_enabled(False)
    return w.grad.clone()


def test_own_grad_buffers_keep_accumulation_out_of_a_replayed_output() -> None:
    # .grad None: the first micro-batch's output becomes .grad, each later call rewrites it, then adds
    # itself again: 2 x the last micro-batch (2 x 2 x 2 = 8), the silent form of #169545
    assert _accumulate(owned=False).tolist() == [8.0] * 3
    # own zeroed buffers: AccumulateGrad adds in place and only reads the replayed output
    assert _accumulate(owned=True).tolist() == [16.0] * 3


def test_own_grads_allocates_once_and_leaves_frozen_parameters() -> None:
    a, frozen = torch.nn.Parameter(torch.ones(2, 2)), torch.nn.Parameter(torch.ones(2), requires_grad=False)
    own_grads([a, frozen])
    first = a.grad
    assert first is not None and first.shape == a.shape and not first.any() and frozen.grad is None
    own_grads([a])
    assert a.grad is first


def _train(tmp_path: Path, name: str) -> list[dict]:
    from nsa.train.cli import main

    sets = ["train.device=cpu", "model.nsa.backend=eager", "train.seq_len=32", "train.batch_size=2",
            "model.n_layers=1", "train.steps=2", "train.grad_accum=3", "train.log_every=1", "train.eval_every=0",
            "train.warmup_steps=0", "train.save_final=false", "telemetry.tensorboard=false",
            "telemetry.nsa_stats_every=100"]  # fmt: skip
    argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--run-dir", str(tmp_path / name)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    return [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def test_the_trainers_own_buffer_path_sums_as_the_ordinary_path(tmp_path: Path, monkeypatch) -> None:
    """The trainer's CUDA-graphs path forced on CPU (eager, 3 micro-batches a step, 2 steps): the
    same losses and grad norms as the ordinary path (0 + g1 is g1: equal but for CPU BLAS run-to-run
    rounding, which MKL allows without its reproducibility mode), with .grad buffers
    allocated before the first backward and the same tensors every step (zeroed in place)."""
    from nsa.train import trainer

    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    plain = _train(tmp_path, "plain")

    marks, buffers, zeroing = [], [], []
    real_own, real_zero = trainer.own_grads, torch.optim.Optimizer.zero_grad

    def spy_own(params):
        real_own(params)
        buffers.append([p.grad for p in params])

    def spy_zero(self, set_to_none=True):
        zeroing.append(set_to_none)
        return real_zero(self, set_to_none)

    monkeypatch.setattr(trainer, "cudagraphs", lambda *a: True)
    monkeypatch.setattr(trainer, "own_grads", spy_own)
    monkeypatch.setattr(torch.optim.Optimizer, "zero_grad", spy_zero)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    owned = _train(tmp_path, "owned")

    for a, b in zip(owned, plain, strict=True):
        for key in ("loss", "grad_norm"):
            assert math.isclose(a[key], b[key], rel_tol=1e-5), (key, owned, plain)
    assert len(plain) == 2 and plain[0]["grad_norm"] > 0
    assert len(marks) == 2 * 3 and zeroing == [False] * 2 and len(buffers) == 2
    assert all(g is not None for g in buffers[0])
    assert all(a is b for a, b in zip(buffers[0], buffers[1], strict=True))


def _graphs_check():
    spec = importlib.util.spec_from_file_location("graphs_check", REPO / "bench" / "graphs_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_graphs_check_refuses_bad_arguments_with_exit_2(capsys) -> None:
    gc = _graphs_check()
    tiny = str(REPO / "configs" / "tiny.yaml")
    for argv, says in (
        (["--modes", "default"], "give two of"),
        (["--modes", "default,max-autotune"], "give two of"),
        (["--steps", "2", "--skip", "2"], "--steps 2"),
        (["--grad-accum", "0"], "--grad-accum 0"),
        (["--gnorm-rtol", "0"], "--gnorm-rtol 0"),
        (["--config", tiny, "--set", "train.nope=1"], "train.nope"),
        # no CUDA graphs on the CPU: refused before any training
        (
            ["--config", tiny, "--set", "train.device=cpu", "--set", "parallel.compile=true"],
            "train.device=cpu",
        ),
    ):
        assert gc.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("graphs_check: ") and says in err and "Fix: " in err, (argv, err)


def test_graphs_check_compares_two_runs_and_fails_on_a_difference(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """default against default on CPU (the trainer in-process instead of a subprocess): every step
    agrees, exit 0; then one run's grad norm off by 2 % fails the step and the check (exit 1)."""
    from nsa.train.cli import main as train_main

    gc = _graphs_check()
    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(gc, "run_trainer", lambda cmd, env, timeout: (train_main(cmd[3:]), ""))
    argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--modes", "default,default", "--steps", "2",
            "--skip", "1", "--grad-accum", "2", "--batch-size", "2", "--seq-len", "32",
            "--set", "model.nsa.backend=eager", "--set", "model.n_layers=1", "--set", "train.device=cpu",
            "--run-dir", str(tmp_path)]  # fmt: skip
    rc, out = gc.main(argv), capsys.readouterr()
    assert rc == 0, (out.out[-3000:], out.err[-3000:])
    lines = [json.loads(x) for x in out.out.splitlines() if x.startswith("{")]
    announced = [x for x in lines if x["bench"] == "train/graphs_check_run"]
    rows, summary = [x for x in lines if x["bench"] == "train/graphs_check"], lines[-1]
    assert [(a["mode"], a["rc"], a["steps_logged"]) for a in announced] == [("default", 0, 2)] * 2, lines
    # each run's line as it ends, before the comparison (by identity: the two runs' lines are equal
    # dicts when their wall times round alike, and list.index would find the first)
    assert [i for i, x in enumerate(lines) if x["bench"] == "train/graphs_check_run"] == [0, 1], lines
    assert [r["step"] for r in rows] == [1, 2] and all(r["ok"] for r in rows), lines
    assert (
        summary["ok"]
        and summary["modes"] == ["default#1", "default#2"]
        and summary["max_grad_norm_rel_diff"] <= 1e-5
    ), summary

    runs = [
        {"mode": m, "rc": 0, "wall_s": 1.0,
         "steps": [json.loads(x) for x in (tmp_path / f"{i}-default" / "metrics.jsonl").read_text().splitlines()]}
        for i, m in enumerate(("default", "reduce-overhead"))
    ]  # fmt: skip
    runs[1]["steps"][0]["grad_norm"] *= 1.02
    rows, summary = gc.compare(runs[0], runs[1], 0.01, 0.01, 1)
    assert (
        [r["ok"] for r in rows] == [False, True] and summary["steps_differing"] == [1] and not summary["ok"]
    )
    runs[1]["rc"] = 1
    runs[1]["steps"][0]["grad_norm"] /= 1.02
    assert not gc.compare(runs[0], runs[1], 0.01, 0.01, 1)[1]["ok"]  # a failed run fails the check


def test_the_boot_banner_says_which_compile_mode_the_blocks_got() -> None:
    """`auto` resolved on the run's device and world, and the own-buffer note under CUDA graphs."""
    from nsa.train import boot
    from nsa.train.config import load_config
    from nsa.train.dist import DistInfo
    from nsa.train.flops import flops_account
    from nsa.train.parallelize import compile_mode

    cpu = DistInfo(0, 0, 1, torch.device("cpu"), None)
    tiny = REPO / "configs" / "tiny.yaml"
    want = {
        "parallel.compile=false": "compile=off)",
        "parallel.compile_mode=default": "compile=inductor)",
        "parallel.compile_mode=auto": "compile=inductor default (auto))",  # CPU: no CUDA graphs
        "parallel.compile_mode=reduce-overhead": "compile=inductor reduce-overhead; grads in trainer-owned buffers)",
    }
    for mode, says in want.items():
        cfg = load_config(tiny, ["parallel.compile=true", mode])
        lines = boot.banner(
            cfg, cpu, config_path="c.yaml", n_params=1, vocab=257, bf16=False, fsdp=False,
            flops=flops_account(cfg, 257), peak=None, data_desc="d", malloc_note="", run_dir=Path("r"), resume="no",
        )  # fmt: skip
        assert lines["world"].endswith(says), (mode, lines["world"])
    auto = load_config(tiny, ["parallel.compile=true", "parallel.compile_mode=auto"]).parallel
    assert compile_mode(auto, DistInfo(0, 0, 1, torch.device("cuda", 0), None)) == "reduce-overhead"
    assert compile_mode(auto, DistInfo(0, 0, 2, torch.device("cuda", 0), "nccl")) == "default"


def test_the_docs_list_every_compile_mode_and_the_check() -> None:
    from typing import get_args

    from nsa.train.config import ParallelConfig

    choices = get_args(ParallelConfig.model_fields["compile_mode"].annotation)
    doc = (REPO / "docs" / "training.md").read_text()
    assert f"`compile_mode: {'|'.join(choices)}`" in doc
    for name in ("own_grads", "bench/graphs_check.py", "pytorch/pytorch#169545", "`compile_mode: auto`"):
        assert name in doc, name


def test_graphs_check_control_switches_the_own_buffers_off_and_must_see_a_difference(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """--control's trainer source replaces trainer.own_grads with a no-op; a control that agrees with
    the first run (here on CPU, no CUDA graphs: nothing to see) fails the check, exit 1."""
    import sys

    import pytest

    from nsa.train import trainer
    from nsa.train.cli import main as train_main

    gc = _graphs_check()
    real = trainer.own_grads
    monkeypatch.setattr(trainer, "own_grads", real)  # restored after the test
    monkeypatch.setattr(sys, "argv", ["-c", "--config", str(REPO / "configs" / "tiny.yaml"), "--check"])
    with pytest.raises(SystemExit) as ei:
        exec(compile(gc.CONTROL, "<control>", "exec"), {})
    assert ei.value.code == 0 and trainer.own_grads is not real
    monkeypatch.setattr(trainer, "own_grads", real)
    capsys.readouterr()

    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cmds = []
    monkeypatch.setattr(
        gc, "run_trainer", lambda cmd, env, timeout: (cmds.append(cmd[1:3]), train_main(cmd[3:]), "")[1:]
    )
    argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--modes", "default,default", "--steps", "1",
            "--skip", "0", "--grad-accum", "2", "--batch-size", "1", "--seq-len", "32", "--control",
            "--set", "model.nsa.backend=eager", "--set", "model.n_layers=1", "--set", "train.device=cpu"]  # fmt: skip
    assert gc.main(argv) == 1
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [c[0] for c in cmds] == ["-m", "-m", "-c"] and cmds[2][1] == gc.CONTROL
    assert summary["control"]["detected"] is False and summary["control"]["steps_differing"] == []
    assert summary["steps_differing"] == [] and summary["ok"] is False


def test_nsa_train_refuses_cuda_graphs_on_several_ranks_with_exit_2(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from nsa.train.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    tiny = str(REPO / "configs" / "tiny.yaml")
    argv = ["--config", tiny, "--run-dir", str(tmp_path / "r"), "--set", "parallel.compile=true"]
    assert main([*argv, "--set", "parallel.compile_mode=reduce-overhead", "--set", "train.grad_accum=2"]) == 2
    err = capsys.readouterr().err
    assert f"config error in {tiny}" in err and "world_size=2 parallel.strategy=ddp" in err and "Fix: " in err
    assert not (tmp_path / "r").exists()
    assert main([*argv, "--set", "parallel.compile_mode=auto", "--check"]) == 0  # auto: default there


def test_evals_run_the_blocks_eager_under_cuda_graphs(tmp_path: Path, monkeypatch) -> None:
    """With the CUDA-graphs flag (forced on CPU; compiled blocks, aot_eager) the periodic eval compiles
    nothing: its no-grad forward in eval mode would otherwise be a graph of its own (grad mode and
    `training` are guards), which under reduce-overhead would record CUDA graphs of its own. Without
    the flag the same run compiles that graph at the first eval."""
    from torch._dynamo.utils import counters

    from nsa.train import trainer
    from nsa.train.cli import main

    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)
    sets = ["train.device=cpu", "model.nsa.backend=eager", "train.seq_len=32", "train.batch_size=2",
            "model.n_layers=1", "train.steps=2", "train.log_every=1", "train.eval_every=1", "train.eval_batches=1",
            "train.warmup_steps=0", "train.save_final=false", "telemetry.tensorboard=false",
            "telemetry.nsa_stats_every=100", "parallel.compile=true", "parallel.compile_backend=aot_eager"]  # fmt: skip
    real_eval = trainer.Run._eval

    def compiled_by_evals(name: str, graphed: bool) -> list[int]:
        torch._dynamo.reset()
        counters.clear()
        new: list[int] = []

        def spy(self, step):
            before = counters["stats"]["unique_graphs"]
            try:
                return real_eval(self, step)
            finally:
                new.append(counters["stats"]["unique_graphs"] - before)

        with monkeypatch.context() as m:
            m.setattr(trainer.Run, "_eval", spy)
            if graphed:
                m.setattr(trainer, "cudagraphs", lambda *a: True)
            argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--run-dir", str(tmp_path / name)]
            for s in sets:
                argv += ["--set", s]
            assert main(argv) == 0
        metrics = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert sum("loss/val" in r for r in metrics) == 2, metrics  # both evals ran and scored
        return new

    assert compiled_by_evals("graphed", True) == [0, 0]
    assert compiled_by_evals("plain", False)[0] == 1  # the check can see an eval that compiles
