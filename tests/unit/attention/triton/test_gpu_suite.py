"""scripts/gpu-suite.sh OUT_DIR --interpret: the GPU suite's CPU rehearsal (sections a-c under
TRITON_INTERPRET=1 with the honest-bf16 patch) runs end to end and writes suite.json in the schema the
GPU run uses, so a GPU's minutes are never spent finding a typo in the suite. Also: the script refuses
bad input with exit 2, and the version refusal of an unsupported triton (a stand-in `triton` package
whose only content is an old __version__, on PYTHONPATH in a subprocess: no old triton is installed
here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "scripts" / "gpu-suite.sh"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    env["PYTHON"] = sys.executable
    return {**env, **extra}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_interpret_rehearsal_writes_sections_a_to_c(tmp_path) -> None:
    out = subprocess.run([str(SCRIPT), str(tmp_path / "s"), "--interpret"], env=_env(), capture_output=True,
                         text=True, timeout=880)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "s" / "suite.json").read_text())
    assert doc["schema"] == 1 and doc["mode"] == "interpret" and doc["ok"] is True
    assert list(doc["sections"]) == ["env", "numerics", "determinism"]
    env, num, det = (doc["sections"][k] for k in ("env", "numerics", "determinism"))
    assert env["ok"] and env["triton"] and env["torch"]
    kernels = {r["kernel"] for r in num["records"]}
    assert kernels == {"window", "compressed", "selected", "rope_to_layout", "gate_mix", "NSAAttention"}
    assert {r["dtype"] for r in num["records"] if "dtype" in r} == {"bfloat16", "float16"}
    for r in num["records"]:
        assert r["ok"], r
    assert all(r["table_identical_to_eager_fp32"] for r in num["records"] if r["kernel"] == "compressed")
    module = next(r for r in num["records"] if r["kernel"] == "NSAAttention")
    assert module["params_checked"] >= 10  # projections, gates and the compression MLP
    assert det["ok"] and det["differing"] == []
    assert "numerics" in out.stdout and "PASSED" in out.stdout


def test_bad_invocations_exit_2(tmp_path) -> None:
    no_dir = subprocess.run([str(SCRIPT)], env=_env(), capture_output=True, text=True, timeout=60)
    assert no_dir.returncode == 2 and "usage" in no_dir.stderr
    both = subprocess.run([str(SCRIPT), str(tmp_path), "--quick", "--interpret"], env=_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_an_unsupported_triton_is_refused_with_the_way_out(tmp_path) -> None:
    fake = tmp_path / "triton"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "3.2.0"  # stand-in: an old triton\n')
    code = (
        "from nsa.attention.nsa import resolve_backend\n"
        "for b, d in (('triton', 'cuda'), ('auto', 'cuda'), ('triton', 'cpu')):\n"
        "    try:\n        resolve_backend(b, d)\n    except ValueError as e:\n        print('REFUSED', e)\n"
        "print('eager:', resolve_backend('eager', 'cuda'))\n"
    )
    env = _env(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    refusals = [line for line in out.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refusals) == 3, out.stdout
    for line in refusals:
        assert "triton 3.2.0 is installed" in line and ">= 3.6" in line
        assert "model.nsa.backend: eager" in line
    assert "eager: eager" in out.stdout
