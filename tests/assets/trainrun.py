"""Helpers for the trainer's end-to-end tests: run the real `nsa-train` (alone or under the real
torchrun with gloo) on a fresh run dir and read back what it wrote. The interpreter is taken from
sys.executable, so the tests work from any checkout's venv, not only /work/main/.venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "tiny.yaml"


def torchrun_cmd(nproc: int) -> list[str]:
    """The real torchrun, single node, `nproc` workers; append the script (or -m module) and args."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def train_cmd(nproc: int = 1) -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "nsa.train"]
    return [*torchrun_cmd(nproc), "-m", "nsa.train"]


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("CONFIG", "NSA_FAULT", "NSA_MALLOC", "NSA_MALLOC_REEXEC", "RANK", "WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    return env


def run_train(
    run_dir: Path,
    sets: list[str] = (),
    nproc: int = 1,
    config: Path = TINY,
    resume: bool = False,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    cmd = [*train_cmd(nproc), "--config", str(config), "--run-dir", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    if resume:
        cmd.append("--resume")
    return subprocess.run(
        cmd, cwd=REPO, env=env or clean_env(), capture_output=True, text=True, timeout=timeout
    )


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    p = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def train_losses(run_dir: Path) -> dict[int, float]:
    """step -> train loss; a step logged twice (before a crash and after resume) keeps the later one."""
    return {r["step"]: r["loss"] for r in metrics(run_dir) if "loss/train" in r}


def events(run_dir: Path) -> list[dict[str, Any]]:
    p = run_dir / "events.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"rc={proc.returncode}\nstdout tail:\n{proc.stdout[-3000:]}\nstderr tail:\n{proc.stderr[-3000:]}"


# --- the fixed corpus the tiny model must memorise (test_train_runs + the golden-loss file) -----
WORDS = [
    "quick",
    "brown",
    "red",
    "slow",
    "green",
    "sly",
    "old",
    "young",
    "tiny",
    "big",
    "grey",
    "white",
    "black",
    "swift",
    "calm",
    "wild",
]
GOLDEN = Path(__file__).resolve().parent / "tiny_losses.json"
OVERFIT_STEPS = 150


def write_fixed_corpus(path: Path) -> float:
    """48 short sentences as jsonl documents; returns the corpus's byte-unigram entropy in nats."""
    import collections
    import math

    sents = [
        f"Sentence {i}: the {w} fox jumps over the lazy dog number {i * 7 % 13}."
        for i, w in enumerate(WORDS * 3)
    ]
    path.write_text("".join(json.dumps({"text": s}) + "\n" for s in sents))
    data = "".join(sents).encode()
    counts = collections.Counter(data)
    return -sum(c / len(data) * math.log(c / len(data)) for c in counts.values())


def overfit_sets(corpus: Path) -> list[str]:
    return [
        "data.source=files", f"data.paths=[{corpus}]", f"train.steps={OVERFIT_STEPS}", "train.log_every=10",
        "train.eval_every=50", "train.save_every=50", "train.keep_last=2",
    ]  # fmt: skip


if __name__ == "__main__":
    # Regenerate the golden losses after an INTENDED change to the training math:
    #   python tests/assets/trainrun.py
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        corpus = Path(d) / "corpus.jsonl"
        write_fixed_corpus(corpus)
        proc = run_train(Path(d) / "run", overfit_sets(corpus))
        assert proc.returncode == 0, explain(proc)
        losses = train_losses(Path(d) / "run")
    GOLDEN.write_text(
        json.dumps({"config": "configs/tiny.yaml + overfit_sets()", "losses": losses}, indent=1) + "\n"
    )
    print(GOLDEN.read_text())
