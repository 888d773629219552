"""`python -m nsa.attention.gpucheck`: the real kernels compile for sm_80/sm_90 within limits, and a
kernel that spills or needs too much shared memory makes it fail. Runs as a subprocess without
TRITON_INTERPRET (this directory's conftest sets it for the interpreter tests).

Who compiles what in CI (docs/attention.md "Triton versions"): this file, in the main run on the
venv's (newest) triton, compiles the compressed module's kernels (12 of the 87 distinct compilations
of both configs x sm_80 / sm_90: the selection under its launcher's register cap, whose assertions
are here) and checks the records' shape, spills and shared memory; the triton leg beside it
(scripts/triton-leg.sh) runs gpucheck for the other three modules on the newest triton and for all
four on triton 3.6 (plus the paper's 16x128 there), failing CI on any kernel that does not compile,
spills or needs too much shared memory: each kernel is compiled once per triton. The full grid here too took 123 s of the main run (CI of 2026-11-27, loaded) for
compilations the leg repeats at a lower CPU priority."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsa.attention import gpucheck

REPO = Path(__file__).resolve().parents[4]
COMPRESSED_KERNELS = {
    "compressed_fwd", "compressed_select", "compressed_bwd_dq", "compressed_bwd_dq_delta",
    "compressed_bwd_dkv", "compressed_bwd_dkv_sum",
}  # fmt: skip


def _run(*args: str, interpret: bool = False, pythonpath: Path | None = None, timeout: float = 600):
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "nsa.attention.gpucheck", *args]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return out, recs


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_compressed_kernels_compile_for_a100_and_h100_at_both_configs_under_their_caps() -> None:
    # The other modules' kernels on this triton, and every module's on 3.6: scripts/triton-leg.sh.
    out, recs = _run("--module", "nsa.attention.triton.compressed")
    bad = [
        f"{r['config']} sm_{r['arch']} {r.get('kernel', r['module'])}: {r.get('error')}"
        for r in recs
        if not r["ok"]
    ]
    assert out.returncode == 0 and not bad, "\n".join(bad) or out.stderr[-3000:]
    got = {(r["config"], r["arch"], r["module"]) for r in recs}
    assert got == {(c, a, "compressed") for c in ("m7c_125m", "long_context") for a in (80, 90)}
    kernels = {(r["arch"], r["kernel"]) for r in recs}
    assert kernels == {(a, k) for a in (80, 90) for k in COMPRESSED_KERNELS}
    for r in recs:
        assert r["registers"] > 0 and r["spill_stores"] == r["spill_loads"] == 0
        assert 0 <= r["smem_bytes"] <= gpucheck.SMEM_LIMIT[r["arch"]]
    # M7C's geometry reaches the kernels: G=6, D=64 wherever a kernel takes them as constexprs.
    assert all(r["constexprs"].get("G", 6) == 6 and r["constexprs"].get("D", 64) == 64 for r in recs)
    # the M7C selection compiled under its launcher's register cap on both archs (a cap can spill)
    sel = {r["arch"]: r for r in recs if r["kernel"] == "compressed_select" and r["config"] == "m7c_125m"}
    assert sel[80]["maxnreg"] == 168 and sel[90]["maxnreg"] >= 168
    assert all(r["registers"] <= r["maxnreg"] for r in sel.values())


def test_every_module_lists_its_kernels_at_both_configs_and_archs() -> None:
    """What the leg's full gpucheck compiles (the test above compiles one module of it): each of the
    four modules lists kernels for both configs on both archs, with the configs' geometry (G 6, D 64
    wherever a kernel takes them as constexprs)."""
    import importlib

    for c in gpucheck.DEFAULT_CONFIGS:
        shape = gpucheck.shape_from_config(REPO / c)
        assert (shape.group, shape.head_dim) == (6, 64)
        for name in gpucheck.MODULES:
            mod = importlib.import_module(name)
            for arch in (80, 90):
                specs = mod.gpucheck_specs(shape, arch)
                assert specs, (c, name, arch)
                assert all(s.constexprs.get("G", 6) == 6 and s.constexprs.get("D", 64) == 64 for s in specs)


BAD_KERNELS = """
import triton
import triton.language as tl

from nsa.attention.triton.spec import KernelSpec


@triton.jit
def spiller(a, b, c, K: tl.constexpr, N: tl.constexpr):
    # A [N, N] float32 accumulator in one warp: N*N/32 registers per thread (512 at N=128).
    r = tl.arange(0, N)
    k = tl.arange(0, K)
    x = tl.load(a + r[:, None] * K + k[None, :])
    y = tl.load(b + k[:, None] * N + r[None, :])
    acc = tl.dot(x, y)
    acc = acc * tl.sum(acc, axis=1)[:, None]
    tl.store(c + r[:, None] * N + r[None, :], acc)


@triton.jit
def smem_hog(a, b, c, n, BM: tl.constexpr, BK: tl.constexpr):
    # Pipelined [BM, BK] x [BK, BM] bf16 tiles: 2 * BM * BK * 2 bytes per stage (128 KB at 128 x 256;
    # 196,608 B compiled at 3 stages for sm_80 on triton 3.9 > 166,912 B; 256 x 256 took 5.7 s to
    # compile, 128 x 256 1.8 s: 2026-11-27).
    r = tl.arange(0, BM)
    k = tl.arange(0, BK)
    acc = tl.zeros([BM, BM], dtype=tl.float32)
    for i in range(0, n, BK):
        x = tl.load(a + r[:, None] * n + (i + k)[None, :])
        y = tl.load(b + (i + k)[:, None] * BM + r[None, :])
        acc += tl.dot(x, y)
    tl.store(c + r[:, None] * BM + r[None, :], acc)


def gpucheck_specs(shape, arch):
    sig = {"a": "*bf16", "b": "*bf16", "c": "*fp32"}
    return [
        KernelSpec("spiller", spiller, {**sig, "K": "constexpr", "N": "constexpr"}, {"K": 64, "N": 128}, 1, 1),
        KernelSpec(
            "smem_hog", smem_hog, {**sig, "n": "i32", "BM": "constexpr", "BK": "constexpr"},
            {"BM": 128, "BK": 256}, 8, 3,
        ),
    ]
"""


def _bad_module(tmp_path: Path) -> Path:
    (tmp_path / "gpucheck_bad_kernels.py").write_text(textwrap.dedent(BAD_KERNELS))
    return tmp_path


@pytest.mark.slow
def test_a_kernel_that_spills_or_needs_too_much_shared_memory_fails(tmp_path) -> None:
    # Also run under TRITON_INTERPRET=1: gpucheck must start over without it, not compile interpreted fns.
    out, recs = _run(
        "--module", "gpucheck_bad_kernels", "--arch", "80", "--config", str(REPO / "configs/m7c_125m.yaml"),
        interpret=True, pythonpath=_bad_module(tmp_path), timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    assert "re-executing without it" in out.stderr
    by = {r["kernel"]: r for r in recs}
    assert set(by) == {"spiller", "smem_hog"}
    assert (
        not by["spiller"]["ok"] and "spills" in by["spiller"]["error"] and by["spiller"]["spill_stores"] > 0
    )
    assert not by["smem_hog"]["ok"] and "shared memory" in by["smem_hog"]["error"]
    assert by["smem_hog"]["smem_bytes"] > gpucheck.SMEM_LIMIT[80]


def test_refuses_interpreted_kernels_in_process(capsys) -> None:
    # The conftest set TRITON_INTERPRET=1 in this process: a kernel module imported now would hold
    # interpreted functions, so run() refuses before importing any.
    assert gpucheck.run([str(REPO / "configs/m7c_125m.yaml")], [80], ["nsa.attention.triton.window"]) == 2
    assert "TRITON_INTERPRET is set" in capsys.readouterr().err


def test_bad_config_is_exit_2(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {nsa: {backend: cuda}}\ntrain: {steps: 1, seq_len: 64, batch_size: 1}\n")
    out, recs = _run("--config", str(bad), timeout=120)
    assert out.returncode == 2 and not recs
    assert "model.nsa.backend" in out.stderr and "Fix:" in out.stderr


def test_shape_comes_from_the_config_loader() -> None:
    s = gpucheck.shape_from_config(REPO / "configs/long_context.yaml")
    assert (s.name, s.head_dim, s.group, s.block_len, s.block_stride, s.sel_block, s.n_sel, s.window, s.dtype) == (
        "long_context", 64, 6, 32, 16, 64, 16, 512, "bf16",
    )  # fmt: skip


def test_grid_points_keep_the_config_geometry_and_bad_points_are_refused() -> None:
    import argparse

    assert gpucheck.parse_point("16x128") == (16, 128)
    for bad in ("16", "0x64", "2x95", "ax64"):
        with pytest.raises(argparse.ArgumentTypeError, match="--shape"):
            gpucheck.parse_point(bad)
    assert {(g, d) for g in (1, 2, 6, 16) for d in (64, 96, 128)} <= set(gpucheck.GRID)
    (s,) = gpucheck.grid_shapes([(2, 96)], REPO / "configs/m7c_125m.yaml")
    m7c = gpucheck.shape_from_config(REPO / "configs/m7c_125m.yaml")
    assert (s.name, s.group, s.head_dim) == ("G2xD96", 2, 96)
    assert (s.block_len, s.block_stride, s.sel_block, s.n_sel, s.window, s.dtype) == (
        m7c.block_len, m7c.block_stride, m7c.sel_block, m7c.n_sel, m7c.window, m7c.dtype,
    )  # fmt: skip


def test_check_spec_compiles_under_the_launchers_register_cap(monkeypatch) -> None:
    """The selection launches with `maxnreg` (compressed._config maxnreg_sel: sm_80's and sm_90's
    capped M7C selection); gpucheck compiled it uncapped, so a cap that spills went unchecked there."""
    import types

    import triton

    from nsa.attention.triton import compressed
    from nsa.attention.triton.spec import GpuShape

    m7c = GpuShape(
        "m7c", head_dim=64, group=6, block_len=32, block_stride=16, sel_block=64, n_sel=16, window=512
    )
    paper = GpuShape("paper", head_dim=128, group=16, block_len=32, block_stride=16, sel_block=64, n_sel=16,
                     window=512)  # fmt: skip
    # uncapped on every triton (the paper's shape is capped on sm_90 under triton 3.6 only: _paper_insert_cap)
    g16 = GpuShape(
        "g16", head_dim=64, group=16, block_len=32, block_stride=16, sel_block=64, n_sel=16, window=512
    )
    for shape, arch in ((m7c, 80), (m7c, 90), (paper, 90), (g16, 90)):
        specs = {s.name: s for s in compressed.gpucheck_specs(shape, arch)}
        want = compressed._config(shape.group, shape.head_dim, 16, 32, 16, 64, arch)["maxnreg_sel"]
        assert specs["compressed_select"].maxnreg == want, (shape.name, arch)
        assert all(s.maxnreg == 0 for n, s in specs.items() if n != "compressed_select")
    assert (
        compressed.gpucheck_specs(m7c, 90)[1].maxnreg > 0
        and compressed.gpucheck_specs(g16, 90)[1].maxnreg == 0
    )
    seen = []

    def fake_compile(spec, arch, **options):
        seen.append(options)
        return types.SimpleNamespace(metadata=types.SimpleNamespace(shared=0)), {
            "registers": 100, "spill_stores": 0, "spill_loads": 0, "static_smem": 0,
        }  # fmt: skip

    monkeypatch.setattr(gpucheck, "compile_spec", fake_compile)
    monkeypatch.setattr(triton.runtime.jit, "JITFunction", object)  # the conftest's interpreted fns pass
    spec = next(s for s in compressed.gpucheck_specs(m7c, 80) if s.name == "compressed_select")
    rec = gpucheck.check_spec(spec, 80)
    assert seen == [{"maxnreg": 168}] and rec["maxnreg"] == 168 and rec["ok"]
    uncapped = next(s for s in compressed.gpucheck_specs(g16, 90) if s.name == "compressed_select")
    assert "maxnreg" not in gpucheck.check_spec(uncapped, 90) and seen[-1] == {}
    # configs that differ only in the cap are two compilations
    from dataclasses import replace

    assert gpucheck._key(spec, 80) != gpucheck._key(replace(spec, maxnreg=0), 80)
