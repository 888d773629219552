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
    assert doc["schema"] == 2 and doc["mode"] == "interpret" and doc["ok"] is True
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
    # Each item is timed (what the budget's estimates are tuned from), none skipped; the figures are
    # rounded (the first GPU run's RoPE / gate-mix records carried 16 digits); the commit is named.
    assert [i["item"] for i in num["items"]] == ["G2 D32 T40 bf16", "NSAAttention", "G2 D32 T40 fp16"]
    assert num["skipped_for_time"] == [] and all(i["seconds"] >= 0 for i in num["items"])
    floats = [v for r in num["records"] for part in r.values() if isinstance(part, dict)
              for v in part.values() if isinstance(v, float)]  # fmt: skip
    assert floats and all(v == round(v, 6) for v in floats)
    assert env["git_commit"] and doc["command"].startswith("python -m nsa.attention.gpusuite ")
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
    meta = tmp_path / "triton-3.2.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 3.2.0\n")
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
    # nsa-train refuses before it starts anything (torch-free check): exit 2, the run dir untouched.
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "nsa.train", "--config", str(REPO / "configs/tiny.yaml"), "--run-dir",
           str(run_dir), "--set", "model.nsa.backend=triton"]  # fmt: skip
    train = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert train.returncode == 2, train.stderr[-2000:]
    assert "triton 3.2.0 is installed" in train.stderr and "model.nsa.backend: eager" in train.stderr
    assert not run_dir.exists()
