"""torch.compile of checkpointed blocks from a cold process, and nsa-train's compile record.

The NSA ops are bound at construction: a forward that built its op table lazily (a SimpleNamespace
and an import inside `forward`) compiled 0 graphs under activation checkpointing, silently. Both
tests start a fresh process, as a run does.

Run: .venv/bin/pytest tests/unit/train/test_compile.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

COLD = """
import torch
from torch._dynamo.utils import counters
from nsa.attention import NSAAttention
from nsa.train.parallelize import CheckpointedForward

graphs = []
def counting(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward

a = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 32, backend="triton")
a.forward = CheckpointedForward(a.forward)
a.compile(backend=counting)
x = torch.randn(1, 24, 32, requires_grad=True)
a(x).sum().backward()
print(len(graphs), sum(counters["graph_break"].values()), x.grad is not None and bool(x.grad.isfinite().all()))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "CONFIG", "TRITON_INTERPRET")
    }
    env.update(OMP_NUM_THREADS="1", NSA_MALLOC="system", **extra)
    return env


def test_cold_process_compiles_a_checkpointed_triton_attention_in_one_graph() -> None:
    # Triton kernels on CPU tensors need the interpreter; the graph count does not depend on it.
    out = subprocess.run(
        [sys.executable, "-c", COLD],
        env=_env(TRITON_INTERPRET="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1", "0", "True"], out.stdout + out.stderr[-2000:]


def test_nsa_train_compiles_checkpointed_blocks_on_cpu_and_records_it(tmp_path: Path) -> None:
    """The trainer's own path (per-block compile after full checkpointing), counted after step 1."""
    run = tmp_path / "run"
    sets = [
        "train.device=cpu", "train.steps=2", "train.seq_len=32", "train.batch_size=2", "train.log_every=1",
        "train.eval_every=0", "train.save_final=false", "train.warmup_steps=0", "telemetry.tensorboard=false",
        "parallel.compile=true", "parallel.compile_backend=aot_eager", "parallel.activation_checkpointing=full",
        "model.n_layers=1",
    ]  # fmt: skip
    cmd = [sys.executable, "-m", "nsa.train", "--config", "configs/tiny.yaml", "--run-dir", str(run)]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    compiled = [e for e in events if e["kind"] == "compiled"]
    assert len(compiled) == 1 and compiled[0]["detail"]["graphs"] >= 1, compiled
    assert compiled[0]["detail"]["breaks"] == 0, compiled
    assert "[nsa]  compile: 1 graphs, 0 graph breaks (aot_eager, 1 blocks)" in out.stdout, out.stdout[-2000:]
    # NSA stats still arrive (from an eager side pass: compiled blocks cannot write them).
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("nsa/gate/cmp" in m for m in metrics)


def test_compile_that_compiles_nothing_is_an_error(tmp_path: Path) -> None:
    """compile: true with 0 graphs stops the run (here dynamo is switched off from outside)."""
    run = tmp_path / "run"
    sets = [
        "train.device=cpu", "train.steps=2", "train.seq_len=32", "train.batch_size=2", "train.eval_every=0",
        "train.save_final=false", "telemetry.tensorboard=false", "parallel.compile=true", "model.n_layers=1",
    ]  # fmt: skip
    cmd = [sys.executable, "-m", "nsa.train", "--config", "configs/tiny.yaml", "--run-dir", str(run)]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(
        cmd, cwd=REPO, env=_env(TORCHDYNAMO_DISABLE="1"), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 1, out.stderr[-3000:]
    assert "compiled 0 graphs in the first step" in out.stderr and "Fix:" in out.stderr
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["detail"]["error"] for e in events if e["kind"] == "error"] == ["compile"]
    assert "first_step" not in [e["kind"] for e in events]


def test_compile_mode_reduce_overhead_is_checked_at_load_and_exits_2(tmp_path: Path) -> None:
    import pytest

    from nsa import malloc
    from nsa.train.cli import cudagraphs_problem, main
    from nsa.train.config import ConfigError, load_config

    tiny = REPO / "configs" / "tiny.yaml"
    assert load_config(tiny).parallel.compile_mode == "default"
    ok = load_config(tiny, ["parallel.compile=true", "parallel.compile_mode=reduce-overhead"])
    assert ok.parallel.compile_mode == "reduce-overhead"
    bad = {
        ("parallel.compile_mode=reduce-overhead",): "parallel.compile=false",
        ("parallel.compile=true", "parallel.compile_backend=aot_eager", "parallel.compile_mode=reduce-overhead"):
            "parallel.compile_backend=aot_eager",
        ("parallel.compile=true", "parallel.compile_mode=reduce-overhead", "train.device=cpu"): "train.device=cpu",
        ("parallel.compile=true", "parallel.compile_mode=max-autotune"): "'default', 'reduce-overhead' or 'auto'",
        ("parallel.compile_mode=auto", "parallel.compile_backend=x"): "parallel.compile_backend",
    }  # fmt: skip
    for sets, says in bad.items():
        with pytest.raises(ConfigError) as ei:
            load_config(tiny, list(sets))
        e = str(ei.value)
        assert str(tiny) in e and "compile_" in e and says in e and "Fix:" in e, e
    # Accumulation is allowed (the trainer owns the .grad buffers), on one rank; several ranks are not
    # known to work with CUDA graphs (FSDP2's all-gathers, DDP's reducer): refused, with auto as a fix.
    graphs = ["parallel.compile=true", "parallel.compile_mode=reduce-overhead"]
    assert load_config(tiny, [*graphs, "train.grad_accum=4"], world_size=1).train.grad_accum == 4
    for strategy in ("ddp", "fsdp"):
        with pytest.raises(ConfigError) as ei:
            load_config(tiny, [*graphs, f"parallel.strategy={strategy}"], world_size=2)
        e = str(ei.value)
        assert (
            e.startswith(f"config error in {tiny} (with --set ")
            and "parallel.compile_mode = 'reduce-overhead'" in e
        )
        assert (
            f"world_size=2 parallel.strategy={strategy}" in e
            and "Fix: set parallel.compile_mode=default" in e
        )
    # auto: never refused; reduce-overhead only with compile, inductor, CUDA, one rank and no recomputation
    for sets, device, world, want in (
        (["parallel.compile=true"], "cuda", 1, "reduce-overhead"),
        (["parallel.compile=true"], "cpu", 1, "default"),
        (["parallel.compile=true"], "cuda", 2, "default"),
        (["parallel.compile=true", "parallel.compile_backend=aot_eager"], "cuda", 1, "default"),
        (["parallel.compile=false"], "cuda", 1, "default"),
        (["parallel.compile=true", "parallel.activation_checkpointing=full"], "cuda", 1, "default"),
        (["parallel.compile=true", "parallel.activation_checkpointing=selective"], "cuda", 1, "default"),
    ):
        p = load_config(
            tiny, [*sets, "parallel.compile_mode=auto", "train.device=cpu"], world_size=world
        ).parallel
        assert p.resolved_compile_mode(device, world) == want, (sets, device, world)
    assert load_config(tiny, graphs).parallel.resolved_compile_mode("cpu", 1) == "reduce-overhead"  # as asked
    argv = [
        "--config",
        str(tiny),
        "--run-dir",
        str(tmp_path / "r"),
        "--set",
        "parallel.compile_mode=reduce-overhead",
    ]
    assert main(argv) == 2
    # train.device auto on a host without a GPU (this one): refused before torch, not trained as `default`
    auto = ["parallel.compile=true", "parallel.compile_mode=reduce-overhead", "train.device=auto"]
    argv = ["--config", str(tiny), "--run-dir", str(tmp_path / "r")] + [a for s in auto for a in ("--set", s)]
    if not malloc.gpu_present():
        assert main(argv) == 2
        assert not (tmp_path / "r").exists()
    says = cudagraphs_problem("reduce-overhead", "auto", gpu=False, source="c.yaml")
    assert says.startswith("config error in c.yaml: parallel.compile_mode = ") and "train.device=auto" in says
    assert "Fix: " in says
    assert cudagraphs_problem("reduce-overhead", "auto", gpu=True) is None
    assert cudagraphs_problem("default", "cpu", gpu=False) is None


def test_reduce_overhead_reaches_each_block_and_marks_every_micro_batch(tmp_path: Path, monkeypatch) -> None:
    """No CUDA graphs on CPU: nn.Module.compile and the step mark are spies, the blocks run eager.
    Each block is compiled with mode reduce-overhead; each micro-batch (2 a step: accumulation is
    allowed, into the trainer's own .grad buffers) starts with torch.compiler.cudagraph_mark_step_begin;
    the eval batches do not (evals run the blocks eager under CUDA graphs: trainer `_eval_stance`)."""
    import torch

    from nsa.train import cli, trainer
    from nsa.train.cli import main

    modes, marks = [], []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: modes.append(kw))
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    monkeypatch.setattr(trainer, "compile_counts", lambda: {"graphs": 1, "breaks": 0})
    monkeypatch.setattr(cli, "cudagraphs_problem", lambda *a: None)  # the spies stand in for CUDA
    monkeypatch.setenv("NSA_MALLOC", "system")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    sets = ["train.device=auto", "train.seq_len=32", "train.batch_size=2", "model.n_layers=2", "train.steps=2",
            "train.grad_accum=2", "train.log_every=2", "train.eval_every=2", "train.eval_batches=3",
            "train.warmup_steps=0", "train.save_final=false", "telemetry.tensorboard=false",
            "parallel.compile=true", "parallel.compile_mode=reduce-overhead"]  # fmt: skip
    argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--run-dir", str(tmp_path / "r")]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    assert modes == [{"backend": "inductor", "mode": "reduce-overhead"}] * 2
    assert len(marks) == 2 * 2  # the 3 eval batches run eager: no graphs, no marks
