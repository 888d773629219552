"""bench/memory.py, the meta-device account of one training step: its live-bytes tracker against hand
counts and against glibc's bytes in use for the same step on real CPU tensors, its autocast
emulation against torch's own CPU autocast, its rows on the tiny config (checkpointing lowers the
peak, the parts add up), and the boot banner's estimate against it. A few seconds."""

from __future__ import annotations

import collections
import ctypes
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nsa.malloc import loaded_allocator

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("bench_memory", REPO / "bench" / "memory.py")
M = importlib.util.module_from_spec(_spec)
sys.modules["bench_memory"] = M
_spec.loader.exec_module(M)


def test_live_bytes_counts_each_storage_once_and_drops_it_when_freed() -> None:
    a = torch.empty(1000, device="meta")  # exists before: not the step's
    with M.LiveBytes(persistent=(a,)) as live:
        b = a * 2  # 4000 bytes
        v = b.view(10, 100)  # a view: no new storage
        b.add_(1)  # in place: the same storage
        a.mul_(3)  # in place on a persistent storage: not counted
        c = torch.empty(500, dtype=torch.bfloat16, device="meta")  # 1000 bytes
        assert live.now == 5000
        del b
        assert live.now == 5000  # the view still holds b's storage
        del v
        assert live.now == 1000
        d = c.float()  # 2000 bytes
        assert live.now == 3000
    assert live.peak == 5000
    del c, d
    assert live.now == 0


def test_peak_through_a_backward_equals_a_hand_count() -> None:
    n = 1000
    x = torch.empty(n, device="meta", requires_grad=True)
    with M.LiveBytes() as live:
        y = x.exp()  # 4n, saved by its own backward (exp saves its result)
        z = y.exp()  # 4n, saved likewise
        s = z.sum()  # 4
        del y  # still saved by the graph
        assert live.now == 8 * n + 4
        s.backward()
    # Backward: the seed (4 bytes), dz = seed * z (4n), then dx = dz * y (4n) while dz is alive.
    assert live.peak == 16 * n + 8
    # After it: the graph freed y; z and s are ours; x.grad (4n) stays.
    assert live.now == 8 * n + 4 and live.serial_of(x.grad) is not None


class _Heap(TorchDispatchMode):
    """glibc's bytes in use (mallinfo2: heap + mmapped blocks) after every op, and their peak."""

    def __init__(self) -> None:
        super().__init__()
        libc = ctypes.CDLL("libc.so.6")
        fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                  "keepcost")  # fmt: skip
        info = type("MallInfo2", (ctypes.Structure,), {"_fields_": [(f, ctypes.c_size_t) for f in fields]})
        libc.mallinfo2.restype = info
        self.mallinfo2 = libc.mallinfo2
        self.base = self.in_use()
        self.peak = 0

    def in_use(self) -> int:
        m = self.mallinfo2()
        return m.uordblks + m.hblkhd

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, self.in_use() - self.base)
        return out


@pytest.mark.skipif(loaded_allocator() != "glibc", reason="reads glibc's malloc counters")
def test_meta_peak_equals_the_real_heap_peak_of_the_same_step_on_cpu() -> None:
    """Independent of the tracker: the same forward + backward on real CPU tensors, glibc's bytes in
    use sampled after every op. The meta count must match them up to malloc's per-block overhead."""
    from nsa.model import RMSNorm, SwiGLU

    def build(device: str) -> tuple[torch.nn.Module, torch.Tensor]:
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            RMSNorm(256, 1e-5), SwiGLU(256, 1024), RMSNorm(256, 1e-5), SwiGLU(256, 1024)
        )
        return net.to(device), torch.ones(4, 256, 256, device=device, requires_grad=True)

    net, x = build("meta")
    with M.LiveBytes(persistent=(*net.parameters(), x)) as live:
        net(x).pow(2).mean().backward()
    net, x = build("cpu")
    net(x).pow(2).mean().backward()  # first use: BLAS and OpenMP allocate their own buffers once
    x.grad = None
    net.zero_grad(set_to_none=True)
    with _Heap() as heap:
        net(x).pow(2).mean().backward()
    assert live.peak > 40 * 2**20  # ~46 MiB: large blocks, so malloc's overhead is small beside them
    assert heap.peak == pytest.approx(live.peak, rel=0.01)


def _saved(fn, x: torch.Tensor) -> collections.Counter:
    got: collections.Counter = collections.Counter()

    def pack(t: torch.Tensor) -> torch.Tensor:
        got[(tuple(t.shape), t.dtype)] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x).sum().backward()
    return got


def test_meta_autocast_saves_what_torch_autocast_saves() -> None:
    """The emulation against the real thing: torch's bf16 autocast on CPU tensors (its linear rule
    is CUDA's) over a norm + SwiGLU block, fp32 master weights; same saved tensors and grad dtypes."""
    from nsa.model import RMSNorm, SwiGLU

    def build(device: str) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(RMSNorm(32, 1e-5), SwiGLU(32, 64)).to(device)

    cpu = build("cpu")
    x = torch.randn(4, 8, 32, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = _saved(cpu, x)
    meta = build("meta")
    M.MetaAutocast(meta)
    got = _saved(meta, torch.empty(4, 8, 32, device="meta", requires_grad=True))
    assert torch.bfloat16 in {k[1] for k in want}  # autocast did cast (the test compares something)
    assert got == want
    assert [p.grad.dtype for p in meta.parameters()] == [p.grad.dtype for p in cpu.parameters()]


@pytest.fixture(scope="module")
def tiny_rows() -> dict[str, dict]:
    cfg = str(REPO / "configs" / "tiny.yaml")
    return {
        ac: M.train_step(cfg, [f"parallel.activation_checkpointing={ac}"], top=3) for ac in ("none", "full")
    }


def test_train_step_rows_add_up_and_checkpointing_lowers_the_peak(tiny_rows: dict[str, dict]) -> None:
    from nsa.model import Transformer
    from nsa.train.config import load_config

    cfg = load_config(REPO / "configs" / "tiny.yaml")
    with torch.device("meta"):
        n_params = Transformer(cfg.model, cfg.resolved_vocab_size()).num_params()
    none, full = tiny_rows["none"], tiny_rows["full"]
    keys = ["memory", "config", "T", "batch", "checkpointing", "peak_live_bytes", "params_bytes", "grads_bytes",
            "optim_bytes", "transient_bytes", "total_gib", "fits_80gb"]  # fmt: skip
    assert none["memory"] == "train_step" and set(keys) <= set(none)
    for row in (none, full):
        assert row["params_bytes"] == row["grads_bytes"] == 4 * n_params  # fp32 masters and grads
        assert 8 * n_params <= row["optim_bytes"] <= 8 * n_params + 4 * 64  # AdamW moments (+ steps)
        assert row["transient_bytes"] > 0  # NSA: the selected backward's index, invisible on meta
        parts = row["peak_live_bytes"] + row["params_bytes"] + row["optim_bytes"] + row["transient_bytes"]
        assert row["total_gib"] == round(parts / 2**30, 2) and row["fits_80gb"]
        assert row["T"] == 128 and row["batch"] == 4
    assert full["peak_live_bytes"] < none["peak_live_bytes"]
    # Without checkpointing the peak is the end of the forward, before any gradient exists.
    assert none["grads_at_peak_bytes"] < 0.01 * none["grads_bytes"]


def test_peak_grows_linearly_with_the_sequence() -> None:
    cfg = str(REPO / "configs" / "tiny.yaml")
    a, b, c = (
        M.train_step(cfg, [f"train.seq_len={T}", "parallel.activation_checkpointing=none"])["peak_live_bytes"]
        for T in (256, 512, 1024)
    )
    # NSA has no [T, T] tensor: each doubling adds about the same activations again.
    assert (c - b) == pytest.approx(2 * (b - a), rel=0.05)


@pytest.mark.parametrize("ac", ["none", "full"])
def test_boot_banner_estimate_agrees_with_the_step_account(ac: str) -> None:
    """The banner's `memory:` estimate of a CUDA run (triton ops) against this account, within 30 %.
    Before, it traced the eager ops on meta (twice the saved bytes: +64 % for M7C at 8k without
    checkpointing) and counted the checkpointed blocks' fp32 inputs as bf16."""
    from nsa.train import memory
    from nsa.train.config import load_config

    sets = ["model.n_layers=2", "train.seq_len=8192", f"parallel.activation_checkpointing={ac}"]
    row = M.train_step(str(REPO / "configs" / "m7c_64k.yaml"), sets)
    cfg = load_config(REPO / "configs" / "m7c_64k.yaml", sets)
    est = memory.estimate(cfg, cfg.resolved_vocab_size(), 1, True, False, torch.device("cuda"))
    # the banner leaves transient buffers out (its docstring): the key-major selected backward's fp32
    # dQ partials alone are 0.39 GiB here, 3.2 GB at 64k
    assert est["total_gb"] == pytest.approx(row["total_gib"] - row["transient_bytes"] / 2**30, rel=0.30)


def test_bad_config_is_refused_with_the_loaders_message_and_exit_2(tmp_path, capsys) -> None:
    rows: list[str] = []
    for argv, said in (
        (["--config", str(tmp_path / "nope.yaml")], "file not found"),
        (["--set", "train.seq_len=-5", "--checkpointing", "full"], "train.seq_len = -5"),
    ):
        with pytest.raises(SystemExit) as e:
            M.main(argv, out=rows.append)
        assert e.value.code == 2 and said in capsys.readouterr().err
    assert rows == []  # nothing printed for a refused config
