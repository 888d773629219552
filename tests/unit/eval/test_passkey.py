"""nsa-eval passkey on a tiny checkpoint, and the same evaluation run by the trainer (eval.long_context_every).

Run: .venv/bin/pytest tests/unit/eval/test_passkey.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa.data.tokenizers import ByteTokenizer
from nsa.eval.cli import main
from nsa.eval.longctx import passkey_prompt

REPO = Path(__file__).resolve().parents[3]


def test_prompt_has_the_length_and_the_key_at_its_depth() -> None:
    tok = ByteTokenizer()
    for depth in (0.0, 0.5, 1.0):
        prompt, ans = passkey_prompt(tok, 300, depth, "12345")
        assert len(prompt) + len(ans) == 300 and tok.decode(ans) == "12345"
        text = tok.decode(prompt)
        assert text.endswith("The pass key is ") and text.count("12345") == 1
        at = text.index("The pass key is 12345") / len(text)
        assert abs(at - depth) < 0.3  # the needle sits where asked, within the fixed text


def test_trainer_and_nsa_eval_write_passkey_and_loss_by_position(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nsa.train.cli import main as train

    run = tmp_path / "run"
    for k in ("RANK", "WORLD_SIZE", "CONFIG", "WANDB_PROJECT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NSA_MALLOC", "system")
    sets = [
        "train.steps=2", "train.seq_len=64", "model.n_layers=1", "train.eval_every=0", "train.eval_batches=1",
        "telemetry.tensorboard=false", "train.device=cpu", "eval.long_context_every=2",
        "eval.passkey_lengths=[128]", "eval.passkey_depths=[0.5]", "eval.passkey_trials=1",
    ]  # fmt: skip
    argv = ["--config", str(REPO / "configs" / "tiny.yaml"), "--run-dir", str(run)]
    for s in sets:
        argv += ["--set", s]
    assert train(argv) == 0  # in process: one torch import for the whole test
    capsys.readouterr()
    during = json.loads((run / "eval" / "passkey.json").read_text())
    assert during["step"] == 2 and [r["length"] for r in during["results"]] == [128]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/passkey/len128_depth0.5" in m for m in metrics)

    assert main(["passkey", "--run-dir", str(run), "--lengths", "128,160", "--depths", "0.2,0.8", "--trials", "2",
                 "--device", "cpu", "--loss-sequences", "2", "--buckets", "4"]) == 0  # fmt: skip
    pk = json.loads((run / "eval" / "passkey.json").read_text())
    assert pk["checkpoint"] == "step-00000002" and pk["trials"] == 2
    cells = {(r["length"], r["depth"]): r for r in pk["results"]}
    assert set(cells) == {(128, 0.2), (128, 0.8), (160, 0.2), (160, 0.8)}
    assert all(0 <= r["accuracy"] <= 1 and r["trials"] == 2 for r in cells.values())
    lbp = json.loads((run / "eval" / "loss_by_position.json").read_text())
    assert lbp["seq_len"] == 64 and len(lbp["buckets"]) == 4 and lbp["sequences"] == 2
    assert all(3.0 < b["loss"] < 7.0 for b in lbp["buckets"])  # ~ln(257) for a 2-step model
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["passkey_accuracy"] == pk["accuracy"]


def test_bad_input_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["passkey", "--run-dir", str(tmp_path)]) == 2
    assert "config.yaml does not exist" in capsys.readouterr().err
