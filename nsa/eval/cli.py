"""`nsa-eval`: score a run's checkpoint on long context, write eval/*.json into the run dir.

Owns argument parsing, choosing the checkpoint (the newest intact one, or --checkpoint), rebuilding
the model from the run's own config.yaml, and writing eval/passkey.json and
eval/loss_by_position.json (also as scalars in metrics.jsonl, TensorBoard and, with WANDB_PROJECT,
W&B). Bad input exits 2 with the file, the value and the fix. The measurements are nsa.eval.longctx.

    nsa-eval passkey --run-dir runs/long --lengths 1024,4096,16384 [--checkpoint step-00002000]
    python -m nsa.eval passkey --run-dir runs/tiny --lengths 128,256 --device cpu
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from nsa.runfiles import EXIT_BAD_INPUT, RunDir, atomic_write_json, verify_checkpoint


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not out or min(out) < 128:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give lengths >= 128 tokens (the key and question fit), e.g. 1024,4096"
        )
    return out


def _floats(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if not out or not all(0 <= d <= 1 for d in out):
        raise argparse.ArgumentTypeError(f"{text!r}: depths are fractions in [0, 1], e.g. 0.1,0.5,0.9")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nsa-eval", description="Long-context evaluation of a run's checkpoint.")
    sub = p.add_subparsers(dest="command", required=True)
    pk = sub.add_parser(
        "passkey", help="Passkey retrieval per (length, depth) and held-out loss by position."
    )
    pk.add_argument("--run-dir", required=True, help="The run directory (its config.yaml and checkpoints/).")
    pk.add_argument("--checkpoint", help="step-N dir name; default: the newest intact checkpoint.")
    pk.add_argument(
        "--lengths", type=_ints, default=[1024], help="Context lengths in tokens, e.g. 1024,4096."
    )
    pk.add_argument("--depths", type=_floats, default=[0.1, 0.5, 0.9], help="Key positions as fractions.")
    pk.add_argument("--trials", type=int, default=4, help="Prompts per (length, depth) (default 4).")
    pk.add_argument("--seed", type=int, default=0, help="Seed of the keys: equal seeds, equal prompts.")
    pk.add_argument(
        "--loss-sequences", type=int, default=8, help="Held-out sequences for loss by position; 0 = skip."
    )
    pk.add_argument("--loss-seq-len", type=int, help="Their length (default: the run's train.seq_len).")
    pk.add_argument("--buckets", type=int, default=16, help="Position buckets of the loss (default 16).")
    pk.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="Where to run.")
    return p


def fail(msg: str) -> int:
    print(f"nsa-eval: {msg}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from nsa.train.config import ConfigError, load_config

    rd = RunDir(args.run_dir)
    if not rd.config.exists():
        return fail(
            f"{rd.config} does not exist: --run-dir must be a run dir the trainer has booted in. Fix: pass one."
        )
    try:
        cfg = load_config(rd.config)
    except ConfigError as e:
        return fail(str(e))
    if args.checkpoint:
        ck = rd.checkpoints_dir / args.checkpoint
        reason = verify_checkpoint(ck) if ck.is_dir() else "no such directory"
        if reason:
            return fail(
                f"--checkpoint {args.checkpoint!r} ({ck}): {reason}. Fix: pick one of {[c.name for c in rd.checkpoints()]}"
            )
    else:
        from nsa.train.ckpt import NoIntactCheckpoint, choose_resume

        try:
            ck, _ = choose_resume(rd)
        except NoIntactCheckpoint as e:
            return fail(str(e))
        if ck is None:
            return fail(
                f"{rd.checkpoints_dir} holds no checkpoint. Fix: train with train.save_final=true first."
            )
    if args.trials < 1 or args.buckets < 1 or args.loss_sequences < 0:
        return fail(
            "--trials and --buckets must be >= 1, --loss-sequences >= 0. Fix: e.g. --trials 4 --buckets 16"
        )
    return run(args, cfg, rd, ck)


def load_model(cfg, ckpt: Path, device):
    import torch

    from nsa.model import Transformer

    model = Transformer(cfg.model, cfg.resolved_vocab_size())
    model.load_state_dict(torch.load(ckpt / "model.pt", map_location="cpu", weights_only=True))
    return model.to(device).eval()


def run(args: argparse.Namespace, cfg, rd: RunDir, ckpt: Path) -> int:
    import torch

    from nsa.data import build_loader
    from nsa.data.tokenizers import build_tokenizer
    from nsa.eval import longctx
    from nsa.telemetry import Recorder
    from nsa.telemetry.wandb_sink import WandbSink
    from nsa.train.ckpt import read_meta

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else contextlib.nullcontext
    model = load_model(cfg, ckpt, device)
    step = int(read_meta(ckpt)["step"])
    tok = build_tokenizer(cfg.data)
    pk = longctx.passkey(model, tok, args.lengths, args.depths, args.trials, args.seed, device, autocast)
    pk.update(checkpoint=ckpt.name, step=step)
    out_dir = rd.root / "eval"
    out_dir.mkdir(exist_ok=True)
    atomic_write_json(out_dir / "passkey.json", pk)
    lbp = None
    if args.loss_sequences:
        seq = args.loss_seq_len or cfg.train.seq_len
        with build_loader(
            cfg.data, seq_len=seq, batch_size=1, rank=0, world_size=1, split="val", seed=cfg.train.seed
        ) as ld:
            batches = [ld.next_batch() for _ in range(args.loss_sequences)]
        lbp = longctx.loss_by_position(model, batches, args.buckets, device, autocast)
        lbp.update(checkpoint=ckpt.name, step=step)
        atomic_write_json(out_dir / "loss_by_position.json", lbp)
    rec = Recorder(rd, 0, cfg.telemetry.tensorboard)
    rec.sink = WandbSink.start(rd.root, cfg.to_dict())
    rec.metrics(step, longctx.metrics(pk, lbp))
    rec.event(
        "eval", step=step, kind_of="long_context", checkpoint=ckpt.name, passkey_accuracy=pk["accuracy"]
    )
    rec.close()
    print(json.dumps({"checkpoint": ckpt.name, "step": step, "passkey_accuracy": pk["accuracy"],
                      "files": [str(p) for p in sorted(out_dir.glob("*.json"))]}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
