"""The triton backend's host-side shortcuts (issue 20, bench/RESULTS.md "Host cost of the NSA layer"):
plain-Python `cdiv` / `next_pow2` give triton's values, the cached launch configs give what their
bodies compute and a fresh dict each call, `autocast_off` still turns autocast off inside an op, and
bench/host_cost.py counts one M7C layer's launches."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import triton

import nsa.attention.triton.compressed as tcmp
import nsa.attention.triton.selected as tsel
from nsa.attention.precision import autocast_off
from nsa.attention.triton import cdiv, frozen_config, next_pow2

_path = Path(__file__).resolve().parents[4] / "bench" / "host_cost.py"
_spec = importlib.util.spec_from_file_location("host_cost", _path)
host_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_cost)


def test_cdiv_and_next_pow2_are_tritons() -> None:
    for n in range(-70, 5000):
        assert next_pow2(n) == triton.next_power_of_2(n), n
    for a in range(0, 300):
        for b in (1, 2, 3, 7, 16, 64, 128):
            assert cdiv(a, b) == triton.cdiv(a, b), (a, b)
    assert next_pow2(2**40 + 1) == triton.next_power_of_2(2**40 + 1)


@pytest.mark.parametrize("arch", [80, 90])
def test_cached_configs_equal_their_bodies_and_are_fresh_copies(arch: int) -> None:
    for G, D in ((1, 64), (6, 64), (16, 128), (8, 96)):
        sel = tsel._config(G, D, 64, arch=arch)
        assert sel == tsel._config.__wrapped__(G, D, 64, arch=arch)
        sel["BR"] = -1  # a caller's change stays in its copy
        assert tsel._config(G, D, 64, arch=arch)["BR"] != -1
        cmp = tcmp._config(G, D, 16, 32, 16, 64, arch)
        assert cmp == tcmp._config.__wrapped__(G, D, 16, 32, 16, 64, arch)
        cmp.clear()
        assert tcmp._config(G, D, 16, 32, 16, 64, arch)
    assert tsel._config(6, 64, 64, arch=80) != tsel._config(6, 64, 64, arch=90)


def test_frozen_config_computes_once_per_arguments() -> None:
    calls = []

    @frozen_config
    def cfg(a: int, b: int = 2) -> dict:
        calls.append((a, b))
        return {"a": a, "b": b}

    assert cfg(1) == cfg(1) == {"a": 1, "b": 2}
    assert cfg(1) is not cfg(1)
    assert cfg(3, b=4) == {"a": 3, "b": 4}
    assert calls == [(1, 2), (3, 4)]


def test_a_patched_config_still_reaches_the_launcher(monkeypatch) -> None:
    # probes replace the module's `_config` (bench/kernel_probe.py): the cache must not hide them
    real = tsel._config
    monkeypatch.setattr(tsel, "_config", lambda *a, **k: {**real(*a, **k), "BR": 7})
    assert tsel._launch_config(6, 64, 64, 90)["BR"] == 7


def test_autocast_off_inside_and_untouched_outside() -> None:
    seen = []

    @autocast_off
    def body(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.is_autocast_enabled("cpu"))
        return x

    x = torch.ones(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        body(x)
        assert torch.is_autocast_enabled("cpu")
    body(x)
    assert not torch.is_autocast_enabled("cpu")
    assert seen == [False, False]


@pytest.mark.timeout(300)
def test_host_cost_counts_one_m7c_layer() -> None:
    row = host_cost.measure(1, 128, torch.bfloat16, reps=2, profile=3)
    # forward: 4 RoPE, compressed attention + selection, the selected key-major forward (index,
    # segments, keys, merge), window, gate mix; backward: 4 RoPE (q's fan-out sum, 3 keys), the gate
    # fold, compressed dQ / dK/dV / sum, selected keys + dQ merge + reduce, window dQ / dK/dV
    assert row["triton_launches"] == {"fwd": 12, "bwd": 13}, row["kernels_fwd"] | row["kernels_bwd"]
    assert row["kernels_fwd"]["_rope_kernel"] == row["kernels_bwd"]["_rope_kernel"] == 4
    assert row["host_us"]["fwd"] > 0 and row["host_us"]["bwd"] > 0
    assert len(row["profile"]) == 3


def test_block_cost_times_whole_blocks_side_by_side() -> None:
    """bench/host_cost.py --block: NSA and dense M7C blocks (width 64) in one process, eager here (the
    compiled rows take minutes of inductor on this VM): NSA's 25 launches, its extra Python calls."""
    row = host_cost.block_cost(["nsa", "dense"], "none", 1, 64, reps=1, rounds=1, autocast=False)
    nsa, dense = row["blocks"]["nsa"], row["blocks"]["dense"]
    assert (nsa["triton_launches"], dense["triton_launches"]) == (25, 0)
    assert nsa["python_calls"] > dense["python_calls"] > 0
    assert row["nsa_minus_dense"]["python_calls"] == nsa["python_calls"] - dense["python_calls"]
    assert len(nsa["host_cpu_us_rounds"]) == 1 and nsa["host_cpu_us"] > 0


def test_block_argument_is_checked_before_anything_runs() -> None:
    assert host_cost.block_arg("nsa,dense:inductor") == (["nsa", "dense"], "inductor")
    assert host_cost.block_arg("dense") == (["dense"], "none")
    for bad, says in (
        ("foo:inductor", "'foo'"),
        ("nsa,nsa", "distinct"),
        ("nsa:bogus", "'bogus'"),
        (":none", "''"),
    ):
        with pytest.raises(ValueError, match=says):
            host_cost.block_arg(bad)


def test_frozen_config_takes_unhashable_arguments_uncached() -> None:
    @frozen_config
    def cfg(a) -> dict:
        return {"n": len(a)}

    assert cfg([1, 2]) == {"n": 2}  # a list stands in for a fake kernel's SymInt


@pytest.mark.timeout(300)
def test_step_host_dry_run_times_a_cpu_step() -> None:
    path = Path(__file__).resolve().parents[4] / "bench" / "step_host.py"
    spec = importlib.util.spec_from_file_location("step_host", path)
    step_host = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_host)
    sets = ["train.device=cpu", "parallel.compile=false", "model.nsa.backend=eager"]
    row = step_host.run(str(path.parents[1] / "configs" / "tiny.yaml"), sets, 2, 1, 0)
    assert row["device"] == "cpu" and row["gpu_ms"] is None and row["steps"] == 2
    assert 0 < row["issue_ms"]["min"] <= row["wall_ms"]["max"]


def test_step_host_checks_the_real_config_first_and_exits_2(monkeypatch, capsys) -> None:
    """--dry-run steps configs/tiny.yaml, but a probe's own --config with its --set must load: CUDA
    graphs with a backend other than inductor exit 2 with the key and fix, not a traceback on the
    leased GPU; a bad --config as well, and --syncs."""
    path = Path(__file__).resolve().parents[4] / "bench" / "step_host.py"
    spec = importlib.util.spec_from_file_location("step_host", path)
    step_host = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_host)
    for argv, says in (
        (
            [
                "--dry-run",
                "--set",
                "parallel.compile_mode=reduce-overhead",
                "--set",
                "parallel.compile_backend=eager",
            ],
            "parallel.compile_backend=inductor",
        ),
        (["--dry-run", "--config", str(path.parent / "missing.yaml")], "missing.yaml"),
        (["--syncs", "--set", "parallel.compile_mod=x"], "parallel.compile_mode"),
    ):
        monkeypatch.setattr("sys.argv", ["step_host.py", *argv])
        with pytest.raises(SystemExit) as ei:
            step_host.main()
        err = capsys.readouterr().err
        assert ei.value.code == 2 and err.startswith("step_host: config error in ") and says in err, (
            argv,
            err,
        )


def test_frozen_config_keys_on_extra() -> None:
    state = {"v": "3.6.0"}

    @frozen_config(extra=lambda: state["v"])
    def cfg(a: int) -> dict:
        return {"a": a, "v": state["v"]}

    assert cfg(1)["v"] == "3.6.0"
    state["v"] = "3.9.0"  # a patched triton version reaches the config
    assert cfg(1)["v"] == "3.9.0"
