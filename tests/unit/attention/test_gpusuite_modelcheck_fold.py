"""nsa/attention/gpusuite/modelcheck.py on the speed core's gate fold: since the suite's core runs
gated.gated_branches (gpu.py `_nsa_core`, the record's `nsa_core`), `compare` prices a record by the
path its core ran: the model's gate mix backward under gate_folded as the fold kernel
(`_gate_fold_bwd`), the branch backwards handed the fold's deltas under delta_folded (no key-major
delta kernel), q's three gradients summed by autograd on either path. The folded records here are a
committed 2026-11-26c record as the folded core's profiler would list it (the kernel names read from
the jit functions, not typed), so each comparison has a known answer."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nsa.attention.gpusuite import gpu as suite_gpu
from nsa.attention.gpusuite import modelcheck
from nsa.attention.triton import fused, gated, selected_keys_bwd
from tests.fixtures.bench import load_bench

m = modelcheck.load_model()
GEO = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
C_RUN = Path(__file__).resolve().parents[3] / "bench" / "gpu" / "2026-11-26c-h100-speed.json"
DOC = json.loads(C_RUN.read_text())
GPU = DOC["sections"]["env"]["gpu"]
RECS = DOC["sections"]["speed"]["records"]
BUILD = m.RUN_BUILDS[C_RUN.name]
# The profiler lists a triton kernel by its jit function's name (the committed tables: `_gate_mix_bwd`,
# `_sel_bwd_delta_kernel`); the fold's backward is fused.py's `_gate_fold_bwd`.
GATE_MIX_BWD = fused._gate_mix_bwd.__name__
GATE_FOLD_BWD = fused._gate_fold_bwd.__name__
SEL_DELTA = selected_keys_bwd._sel_bwd_delta_kernel.__name__
FOLD_DELTA = "gated_branches, fold_delta"


def _folded(rec: dict, path: str = FOLD_DELTA) -> dict:
    """`rec` as the folded core would record it: `nsa_core` set, the gate mix backward's row named as
    the fold kernel, and (fold_delta) no key-major delta kernel: gated.py hands the branches' backward
    ops the fold's deltas, selected_keys_bwd.py then launches no `_sel_bwd_delta_kernel`."""
    out = copy.deepcopy(rec)
    out["nsa_core"] = path
    rows = []
    for row in out["nsa_kernels"]:
        if row["kernel"] == SEL_DELTA and modelcheck.CORE_PATHS[path]["delta_folded"]:
            continue
        if row["kernel"] == GATE_MIX_BWD:
            row = {**row, "kernel": GATE_FOLD_BWD}
        rows.append(row)
    out["nsa_kernels"] = rows
    return out


def _fams(out: dict) -> dict[str, dict]:
    return {f["family"]: f for f in out["families"]}


def _kernels(rec: dict, **flags) -> list:
    """The model's kernels of `rec`'s core on the H100 with the run's build and these flags."""
    s = m.Shape(rec["shape"], rec["B"], rec["H"], rec["Hkv"], rec["D"], GEO["block_len"], GEO["block_stride"],
                GEO["sel_block"], GEO["n_sel"], GEO["window"])  # fmt: skip
    return m.ours(rec["T"], s, cc=m.GPUS["H100"].cc, **{**BUILD, **flags})


def _model_ms(rec: dict, name: str, **flags) -> float:
    return sum(k.time(m.GPUS["H100"]) for k in _kernels(rec, **flags) if k.name == name) * 1e3


FOLD = {"q_grad_fused": False, "gate_folded": True, "delta_folded": True}


def test_the_core_paths_are_the_ones_the_suite_records(monkeypatch) -> None:
    """CORE_PATHS' keys are what gpu.py `core_path` writes into `nsa_core`, under each switch."""
    seen = {}
    for fold_gate, fold_delta in ((False, True), (True, False), (True, True)):
        monkeypatch.setattr(gated, "FOLD_GATE", fold_gate)
        monkeypatch.setattr(gated, "FOLD_DELTA", fold_delta)
        seen[suite_gpu.core_path()] = {"gate_folded": fold_gate, "delta_folded": fold_gate and fold_delta}
    assert seen == modelcheck.CORE_PATHS


@pytest.mark.parametrize("index", [1, 6])  # M7C 8k (key-major selected), paper 8k (query-major)
def test_a_folded_record_prices_the_fold_kernels(index: int) -> None:
    rec = RECS[index]
    assert "nsa_core" not in rec and any(r["kernel"] == GATE_MIX_BWD for r in rec["nsa_kernels"])
    unfolded = modelcheck.compare(rec, GPU, GEO, BUILD)
    folded = modelcheck.compare(_folded(rec), GPU, GEO, BUILD)
    uf, ff = _fams(unfolded), _fams(folded)
    assert unfolded["core"] == "branches one by one" and folded["core"] == FOLD_DELTA
    assert folded["not_priced"] == [] and unfolded["not_priced"] == []
    # the gate's backward: the fold kernel, at the model's folded price (5 activations + the gates, lse
    # and deltas), below the three g * dO copies' (8 activations)
    assert "_gate_mix_bwd" not in ff and "_gate_fold_bwd" not in uf
    fold_ms = _model_ms(rec, "gate_mix_bwd", **FOLD)
    assert ff["_gate_fold_bwd"]["predicted_ms"] == pytest.approx(fold_ms, abs=1e-4)
    assert uf["_gate_mix_bwd"]["predicted_ms"] == pytest.approx(_model_ms(rec, "gate_mix_bwd"), abs=1e-4)
    assert ff["_gate_fold_bwd"]["predicted_ms"] < 0.8 * uf["_gate_mix_bwd"]["predicted_ms"]
    gate_row = next(r for r in rec["nsa_kernels"] if r["kernel"] == GATE_MIX_BWD)
    assert ff["_gate_fold_bwd"]["measured_ms"] == gate_row["ms"]
    # the key-major delta kernel: neither measured nor priced on the delta fold (M7C; the paper shape's
    # query-major forced dQ forms its delta inside, no such kernel either way)
    key_major = any(r["kernel"] == SEL_DELTA for r in rec["nsa_kernels"])
    assert "_sel_bwd_delta" not in ff and ("_sel_bwd_delta" in uf) == key_major
    # every family at the model's price of the folded core's kernels; those the delta fold does not
    # touch at the unfolded price too
    for fam, f in ff.items():
        names = [k for k, v in modelcheck.FOLDED_FAMILIES.items() if v == fam]
        assert f["predicted_ms"] == pytest.approx(sum(_model_ms(rec, n, **FOLD) for n in names), abs=1e-4), (
            fam
        )
        if not {"gate_mix_bwd", "cmp_bwd_dq", "win_bwd_dq", "sel_forced_dq"} & set(names):
            assert f["predicted_ms"] == uf[fam]["predicted_ms"], fam
    assert folded["compared"] == unfolded["compared"] - key_major
    # the core's total: every kernel of a family or in OTHER_IN_CORE of the folded core, q's gradient
    # summed by autograd (q_grad_sum) among them as on the branches one by one
    core = [
        k
        for k in _kernels(rec, **FOLD)
        if k.name in modelcheck.FOLDED_FAMILIES or k.name in modelcheck.OTHER_IN_CORE
    ]
    assert "q_grad_sum" in {k.name for k in core}
    want = sum(k.time(m.GPUS["H100"]) for k in core) * 1e3
    assert folded["nsa_fwd_bwd_ms"]["predicted"] == pytest.approx(want, abs=1e-3)
    dropped = uf["_gate_mix_bwd"]["predicted_ms"] - ff["_gate_fold_bwd"]["predicted_ms"]
    dropped += uf["_sel_bwd_delta"]["predicted_ms"] if key_major else 0.0
    diff = unfolded["nsa_fwd_bwd_ms"]["predicted"] - folded["nsa_fwd_bwd_ms"]["predicted"]
    assert diff > 0.1 and diff == pytest.approx(dropped, abs=1e-3)


def test_the_gate_fold_without_the_delta_fold_keeps_the_delta_kernel() -> None:
    """`gated_branches` (FOLD_DELTA off): the fold kernel without the deltas' stores, each branch
    backward its own delta (the key-major delta kernel launched and priced)."""
    rec = RECS[1]
    out = modelcheck.compare(_folded(rec, "gated_branches"), GPU, GEO, BUILD)
    fams = _fams(out)
    assert out["core"] == "gated_branches" and "_sel_bwd_delta" in fams and out["not_priced"] == []
    no_delta = _model_ms(rec, "gate_mix_bwd", gate_folded=True, delta_folded=False)
    with_delta = _model_ms(rec, "gate_mix_bwd", gate_folded=True, delta_folded=True)
    assert (
        fams["_gate_fold_bwd"]["predicted_ms"] == pytest.approx(no_delta, abs=1e-4) and no_delta < with_delta
    )
    assert fams["_sel_bwd_delta"]["predicted_ms"] == pytest.approx(_model_ms(rec, "sel_bwd_delta"), abs=1e-4)


def test_a_record_without_its_path_prices_the_branches_one_by_one_and_says_what_it_could_not() -> None:
    """No `nsa_core` (every committed run): the branches one by one, as before the field; a profile
    holding the fold kernel then shows it as not priced instead of dropping it silently."""
    rec = _folded(RECS[1])
    del rec["nsa_core"]
    out = modelcheck.compare(rec, GPU, GEO, BUILD)
    assert out["core"] == "branches one by one" and out["not_priced"] == ["_gate_fold_bwd"]
    assert "_gate_fold_bwd" not in _fams(out) and "_gate_mix_bwd" not in _fams(out)
    # a build that names the fold prices it so (RUN_BUILDS of a future run without the field)
    built = modelcheck.compare(rec, GPU, GEO, {**BUILD, "gate_folded": True, "delta_folded": True})
    assert built["core"] == FOLD_DELTA and built["not_priced"] == []
    # the record's field wins over the build's flags
    rec["nsa_core"] = "branches one by one"
    assert modelcheck.core_flags(rec, {"gate_folded": True})["gate_folded"] is False


def test_an_unknown_core_path_is_reported_not_guessed() -> None:
    rec = {**RECS[1], "nsa_core": "gated_branches, fold_everything"}
    out = modelcheck.compare(rec, GPU, GEO, BUILD)
    assert "fold_everything" in out["skipped"] and "gated_branches, fold_delta" in out["skipped"]


def test_the_fit_reads_a_folded_record_as_the_check_does() -> None:
    """bench/attention_fit.py prices each record on its core's path too: the fold kernel's check row
    at the model's folded price, no delta kernel; an unknown path is a BadInput naming the file."""
    fit = load_bench("attention_fit")
    rec = {**_folded(RECS[1]), "build": BUILD}
    rows = {r["check"]: r for r in fit.check_rows([rec])}
    assert "_gate_mix_bwd" not in rows and "_sel_bwd_delta" not in rows
    want = _model_ms(RECS[1], "gate_mix_bwd", gate_folded=True, delta_folded=True)
    assert rows["_gate_fold_bwd"]["model_ms"] == pytest.approx(want, abs=1e-3)
    check = _fams(modelcheck.compare(_folded(RECS[1]), GPU, GEO, BUILD))
    for fam, row in rows.items():
        if fam in check:
            assert row["model_ms"] == pytest.approx(check[fam]["predicted_ms"], abs=1e-3), fam


def test_the_fit_refuses_a_core_path_it_cannot_price(tmp_path) -> None:
    fit = load_bench("attention_fit")
    doc = copy.deepcopy(DOC)
    doc["sections"]["speed"]["records"][0]["nsa_core"] = "fused somehow"
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(fit.BadInput, match=re.escape("suite.json: m7c T2048: nsa_core 'fused somehow'")):
        fit.records([str(path)])


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names[func._schema.name] += 1
        return func(*args, **(kwargs or {}))


def test_the_folded_core_sums_q_gradients_as_autograd_does() -> None:
    """q is one leaf for the fold node's three q inputs: its backward returns three gradients and
    autograd adds them (two adds, as on the branches one by one), which is what `q_grad_sum` prices
    (OTHER_IN_CORE) whatever the path. In triton's interpreter at a small geometry."""
    geo = {"block_len": 8, "block_stride": 4, "sel_block": 8, "n_sel": 3, "window": 8}
    inp = suite_gpu._nsa_core_inputs(1, 24, 2, 3, 16, geo, "cpu", torch.float32)
    y = suite_gpu._nsa_core(inp, geo, 16**-0.5)
    spy = _Ops()
    with spy:
        torch.autograd.grad(y, list(inp.values()), torch.ones_like(y))
    assert spy.names["nsa::triton_gate_fold_bwd"] == 1 and spy.names["aten::add"] == 2
    assert "q_grad_sum" in modelcheck.OTHER_IN_CORE
    assert modelcheck.core_flags({"nsa_core": FOLD_DELTA})["q_grad_fused"] is False
