"""The training loop: boot, (resume), optimizer steps with accumulation, eval, checkpoints, telemetry.

Owns the order of one run on one rank: process group -> telemetry (heartbeat, watchdog, signals)
-> model -> parallelize -> optimizer -> data -> optional resume -> loop -> final checkpoint ->
`finished`. Every rank runs the same code; rank 0 alone prints and writes metrics. It must not parse
configs or command lines (nsa.train.cli does, before anything starts) and must not swallow a failure:
every exit path leaves an `error`, `sigterm` or `finished` event and a return code (0 ok, 1 runtime
failure, 2 bad input, 3 stalled and aborted).

    nsa-train --config configs/tiny.yaml --run-dir runs/tiny
    torchrun --nproc_per_node 2 -m nsa.train --config configs/tiny.yaml --run-dir runs/tiny2
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from nsa.data import DataError, build_loader
from nsa.model import Transformer
from nsa.runfiles import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_SIGTERM, RunDir
from nsa.telemetry import Recorder, SignalHandlers, Watchdog
from nsa.train import boot, ckpt, datastreams, nsastats
from nsa.train.ckpt_async import AsyncSaver
from nsa.train.config import TrainConfig, load_config
from nsa.train.dist import (
    DistInfo,
    Printer,
    StopVote,
    all_gather_objects,
    all_reduce_max,
    all_reduce_mean,
    init_distributed,
    teardown,
)
from nsa.train.faults import KILL_WAIT_S, Fault, Pacer, fault_from_env, kill_self, stall_forever
from nsa.train.flops import flops_account, peak_for
from nsa.train.lr import lr_at
from nsa.train.parallelize import (
    compile_break_reasons,
    compile_counts,
    cudagraphs,
    grad_sync,
    own_grads,
    parallelize,
)
from nsa.train.resume import ResumeMismatch, agreed_resume_point
from nsa.train.stepstats import StepStats, Window


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class Diverged(RuntimeError):
    pass


class CompiledNothing(RuntimeError):
    """parallel.compile is on but dynamo compiled no graph: the run would be silently eager."""


class Terminated(Exception):
    """SIGTERM was handled at a step boundary (checkpoint written): the rank exits 143."""


class CtrlC:
    """Ctrl-C (SIGINT) stops the run as SIGTERM does: a checkpoint at the next step boundary, exit 143.

    Python's default turned Ctrl-C into a KeyboardInterrupt wherever the main thread was: a
    traceback, no checkpoint (the steps since the last save lost) and nothing in events.jsonl saying
    why the run ended. The handler sends this process SIGTERM, so Ctrl-C takes SIGTERM's one path
    (telemetry.SignalHandlers: `sigterm` event, agreed stop, save, 143). Every further SIGINT is that
    same request again: under torchrun a worker gets one from the terminal and one from torchrun's
    agent, which forwards the signal it got. A SIGINT the process inherited as ignored (nohup, a
    background job of a script) stays ignored.
    """

    def __init__(self, rank: int):
        self.rank = rank
        self.previous: Any = None
        self.seen = False

    def install(self) -> CtrlC:
        self.previous = signal.getsignal(signal.SIGINT)
        if self.previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if not self.seen:
            self.seen = True
            print(
                f"[nsa] rank {self.rank}: Ctrl-C (SIGINT): stopping as on SIGTERM",
                file=sys.stderr,
                flush=True,
            )
        os.kill(os.getpid(), signal.SIGTERM)

    def uninstall(self) -> None:
        if self.previous is not None and self.previous is not signal.SIG_IGN:
            with contextlib.suppress(Exception):
                signal.signal(signal.SIGINT, self.previous)


class Run:
    """One rank's run. `execute()` returns the process exit code."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        config_path: str,
        resume: bool,
        *,
        malloc_note: str = "",
        term_save_s: float = 120.0,
    ):
        self.cfg = cfg
        self.malloc_note = malloc_note
        self.rd = RunDir(run_dir)
        self.config_path = config_path
        self.resume = resume
        self.term_save_s = term_save_s
        self.fault: Fault | None = fault_from_env()
        self.pacer = Pacer(self.fault) if self.fault is not None and self.fault.kind == "pace" else None
        self.verbose = os.environ.get("NSA_LOG_LEVEL", "info") in ("debug", "info")
        self.bad_step: int | None = None
        self.saver: AsyncSaver | None = None  # set by _train when ckpt.async
        self._pending: list[Any] = []  # the first training batch, read (and agreed) before step 1

    # --- life cycle ---------------------------------------------------------------------------
    def execute(self) -> int:
        t0 = time.time()
        # Subnormal floats (tails of NSA's softmaxes early in training) made CPU steps 30-60x slower
        # on tiny. Set before the first tensor op: CPU worker threads inherit the flag when created.
        torch.set_flush_denormal(True)
        rank = int(os.environ.get("RANK", "0"))
        self.print0 = Printer(rank)
        # Telemetry first: a rank waiting at rendezvous already beats (phase boot), can be dumped
        # with SIGUSR1 and ends on SIGTERM; "hung at start with empty logs" cannot happen silently.
        rec = self.rec = Recorder(self.rd, rank, self.cfg.telemetry.tensorboard)
        rec.beat("boot", 0)
        signals = self.signals = SignalHandlers(rec)
        signals.install()
        sigint = CtrlC(rank).install()
        watchdog = Watchdog(rec, self.cfg.telemetry.stall_seconds, self.cfg.telemetry.stall_abort)
        watchdog.start()
        info: DistInfo | None = None
        ok = False
        try:
            info = self.info = init_distributed(
                self.cfg.train.device, self.cfg.parallel.timeout_s, str(self.rd.stacks_dir)
            )
            self._train(t0)
            ok = True
            return EXIT_OK
        except Terminated:
            return EXIT_SIGTERM
        except (DataError, ResumeMismatch, ckpt.NoIntactCheckpoint) as e:
            rec.event("error", all_ranks=True, error=type(e).__name__, message=str(e))
            if not getattr(e, "quiet", False):  # quiet: rank 0 prints the same paragraph with the details
                print(f"[nsa] rank {rank}: {e}", file=sys.stderr, flush=True)
            return EXIT_BAD_INPUT
        except Diverged as e:
            rec.event("error", step=self.bad_step, error="diverged", message=str(e))
            self.print0.err(f"[nsa] {e}")
            return EXIT_FAILED
        except CompiledNothing as e:
            rec.event("error", error="compile", message=str(e))
            self.print0.err(f"[nsa] {e}")
            return EXIT_FAILED
        except Exception as e:
            tail = traceback.format_exc().splitlines()[-12:]
            rec.event("error", all_ranks=True, error=type(e).__name__, message=str(e), traceback=tail)
            traceback.print_exc()
            return EXIT_FAILED
        finally:
            watchdog.stop()
            rec.close(0 if ok else 1)
            sigint.uninstall()
            signals.uninstall()
            if info is not None:
                teardown(info, sync=ok)

    def _train(self, t0: float) -> None:
        cfg, info, rec, t = self.cfg, self.info, self.rec, self.cfg.train
        torch.manual_seed(t.seed)  # identical init on every rank (DDP also broadcasts; FSDP2 does not)
        use_bf16 = t.dtype == "bf16" or (t.dtype == "auto" and info.device.type == "cuda")
        fsdp = self.fsdp = info.distributed and cfg.parallel.strategy == "fsdp"
        vocab = cfg.resolved_vocab_size()
        if info.device.type == "cuda":
            # fp32 matmuls (fp32 runs, fp32 islands under autocast) on tensor cores: TF32, ~8x faster.
            torch.set_float32_matmul_precision("high")
        model = Transformer(cfg.model, vocab).to(info.device)
        n_params = model.num_params()
        self.flops = flops_account(cfg, vocab)
        self.model = model
        self.wrapped = parallelize(model, info, cfg.parallel, torch.bfloat16 if (use_bf16 and fsdp) else None)
        # FSDP2 casts parameters itself; elsewhere bf16 is autocast over fp32 master weights.
        self.autocast = (
            (lambda: torch.autocast(info.device.type, dtype=torch.bfloat16))
            if (use_bf16 and not fsdp)
            else contextlib.nullcontext
        )
        self.optimizer = self._optimizer()
        self.cudagraphs = cudagraphs(cfg.parallel, info)
        # Under CUDA graphs the trainer owns the .grad buffers (parallelize.own_grads): accumulation
        # adds each micro-batch's gradient into them instead of keeping a graph-pool tensor that the
        # next micro-batch's replay overwrites (pytorch/pytorch#169545).
        self.params = [p for p in self.wrapped.parameters() if p.requires_grad]
        self.stats = StepStats(info.device)
        self.stop_vote = StopVote(info)
        # The fused AdamW kernel skips the update (and its step count) where found_inf is 1: a
        # non-finite step is dropped on the device, with no host sync (GradScaler's mechanism).
        self.optimizer.found_inf = self.stats.found_inf
        data_kw = dict(
            seq_len=t.seq_len, batch_size=t.batch_size, rank=info.rank, world=info.world_size, seed=t.seed
        )
        step, tokens = 0, 0
        ckpt_dir = self._resume_point() if self.resume else None
        loader: Any = None
        if ckpt_dir is not None:
            rec.beat("checkpoint", 0)
            meta = ckpt.read_meta(ckpt_dir)
            if meta.get("config_hash") != cfg.config_hash():
                self.print0.err(
                    f"[nsa] warning: resuming {ckpt_dir.name} (config {meta.get('config_hash')}) with a changed "
                    f"config ({cfg.config_hash()}); the result will differ from an uninterrupted run"
                )
            try:
                meta, rank_state = ckpt.load(ckpt_dir, info, self.wrapped, self.optimizer)
            except ckpt.ShapeMismatch as e:
                err = ResumeMismatch(self._shape_mismatch(ckpt_dir, meta, str(e)))
                err.quiet = e.quiet  # type: ignore[attr-defined]
                raise err from None
            step, tokens = int(meta["step"]), int(meta["tokens"])
            if cfg.data.resume == "fresh":
                # The weights, optimizer and step go on; the stream starts anew (below, as a new run's)
                # over the corpus as it is now, its file order seeded by the step so the run's first
                # epoch is not replayed as it was.
                data_kw["seed"] += step
                rec.event("data_fresh", step=step)
                self.print0(
                    f"[nsa] resuming {ckpt_dir.name} with a fresh data stream (data.resume: fresh): the saved "
                    "stream positions are not used"
                )
            else:
                saved = rank_state.get("data_streams") or [
                    {"loader": rank_state["loader"], "key": (info.rank, info.world_size)}
                ]
                loader = datastreams.restore(cfg.data, saved, **data_kw)
            if int(meta["world_size"]) != info.world_size:
                rec.event(
                    "resharded",
                    step=step,
                    saved_world_size=int(meta["world_size"]),
                    world_size=info.world_size,
                )
                self.print0(
                    f"[nsa] resuming {ckpt_dir.name} written by {meta['world_size']} ranks on {info.world_size}: "
                    "weights and optimizer resharded"
                    + (
                        "; data streams dealt again (none repeated or skipped)"
                        if cfg.data.resume == "exact"
                        else ""
                    )
                )
        if loader is None:
            loader = datastreams.fresh(cfg.data, **data_kw)
        self.loader = loader
        try:
            self._pending = [self._agreed(loader.next_batch, "training batch")]  # step 1's first micro-batch
            if t.eval_every or cfg.eval.long_context_every:
                self._agreed(self._val_batch, "held-out batch")
        except BaseException:
            loader.close()
            raise
        tokens_per_step = cfg.tokens_per_step(info.world_size)
        self.peak = peak_for(torch.cuda.get_device_name(info.device)) if info.device.type == "cuda" else None
        self._boot_files(n_params, vocab, use_bf16, loader, ckpt_dir)
        if info.is_main:  # after config.yaml exists: W&B gets the same resolved config
            from nsa.telemetry.wandb_sink import WandbSink

            rec.sink = WandbSink.start(
                self.rd.root, {**cfg.to_dict(), "flops": self.flops, "params": n_params}
            )
        rec.event(
            "boot", step=step, config_hash=cfg.config_hash(), params=n_params, world_size=info.world_size,
            flops_per_token=self.flops["flops_per_token"], keys_per_query=self.flops["keys_per_query"]["total"],
        )  # fmt: skip
        if ckpt_dir is not None:
            rec.event("resumed", step=step, checkpoint=ckpt_dir.name, tokens=tokens)
        elif self.resume:
            self.print0(f"[nsa] --resume: no checkpoint in {self.rd.checkpoints_dir}; starting from step 0")

        win_t, win_tokens, win_steps, first = time.time(), 0, 0, True
        nsa_stats: dict[str, float] = {}
        stats_every = cfg.telemetry.nsa_stats_every or t.log_every
        saves = bool(t.save_every or t.save_final)
        if saves:  # from here on SIGTERM means: checkpoint at the next step boundary, then exit 143
            self.signals.arm_save(self.term_save_s)
        self.saver = AsyncSaver(info, self._saved) if cfg.ckpt.async_ else None
        try:
            while step < t.steps:
                step_t0 = time.monotonic()
                lr = lr_at(
                    step,
                    lr=t.lr,
                    min_lr_ratio=t.min_lr_ratio,
                    warmup_steps=t.warmup_steps,
                    total_steps=t.steps,
                )
                want_stats = cfg.model.attention == "nsa" and info.is_main and (step + 1) % stats_every == 0
                stats = self._step(step, lr, loader, want_stats)
                nsa_stats = stats or nsa_stats  # kept until the next log step writes it
                step += 1
                tokens += tokens_per_step
                win_tokens += tokens_per_step
                win_steps += 1
                if first:
                    self._after_first_step(step, t0)
                    first = False
                if step % t.log_every == 0 or step == t.steps:
                    window = self.stats.read(info)  # the one host sync of a log step
                    self._check_finite(window)
                    now = time.time()
                    dt = max(now - win_t, 1e-9)
                    self._log(step, window, lr, tokens, win_tokens / dt, dt / win_steps, loader, nsa_stats)
                    win_t, win_tokens, win_steps, nsa_stats = now, 0, 0, {}
                if t.eval_every and step % t.eval_every == 0:
                    self._eval(step)
                if cfg.eval.long_context_every and step % cfg.eval.long_context_every == 0:
                    self._long_context_eval(step)
                if self.saver is not None:  # a background save's agreement, publish or failure (all ranks)
                    self.saver.poll()
                saved = (t.save_every and step % t.save_every == 0) or (step == t.steps and t.save_final)
                if saved:
                    self._save(step, tokens, loader)
                # The stop vote answers one step late (asynchronous, dist.StopVote): a SIGTERM saves
                # within two steps. A hung collective must not hold it for long; slow healthy steps may.
                self.signals.boundary_wait_s = max(10.0, 6 * (time.monotonic() - step_t0))
                if saves and self._stop_agreed():
                    self.signals.saving.set()
                    if not saved:
                        self._save(step, tokens, loader)
                    self._finish_save()
                    self.stop_vote.drain()  # every rank posted this boundary's vote: it completes
                    self.print0(f"[nsa] stopped by SIGTERM at step {step}; checkpoint written")
                    raise Terminated
            self._finish_save()  # the end of training waits for the last save in flight
        finally:
            if self.saver is not None:
                self.saver.abandon()  # an error's way out: no collective, but no writer left behind
            self.signals.disarm()
            loader.close()
        self.stop_vote.drain()
        rec.beat("done", step)
        rec.event("finished", step=step, tokens=tokens, wall_s=round(time.time() - t0, 2))
        self.print0(f"[nsa] finished: {step} steps, {tokens} tokens, {time.time() - t0:.1f}s")

    def _stop_agreed(self) -> bool:
        """Did SIGTERM reach any rank? Then every rank saves at this same step boundary.

        Ranks receive the signal at slightly different moments; without agreement one would enter
        the save's collectives while another starts the next step's, and both would hang.
        """
        return self.stop_vote.poll(self.signals.stop_requested.is_set())

    def _shape_mismatch(self, ckpt_dir: Path, meta: dict[str, Any], error: str) -> str:
        """One paragraph for a checkpoint whose tensors do not fit this model (a changed `model:` on
        --resume): it was a RuntimeError of every tensor, exit 1, which nsa-launch restarted in a loop.
        Names the model keys changed since the checkpoint's config (the run dir's config.yaml, when its
        hash is the checkpoint's)."""
        changed = ""
        try:
            old = load_config(self.rd.config)
        except Exception:  # no config.yaml, or one this version cannot read: say what is known
            old = None
        if old is not None and old.config_hash() == meta.get("config_hash"):
            a, b = _flat(old.model.model_dump()), _flat(self.cfg.model.model_dump())
            diff = [
                f"model.{k}: {a.get(k)!r} -> {b.get(k)!r}"
                for k in sorted(a.keys() | b.keys())
                if a.get(k) != b.get(k)
            ]
            if diff:
                changed = f" Changed since it was written ({self.rd.config}): {', '.join(diff[:6])}."
        return (
            f"--resume: {ckpt_dir.name} does not fit this model ({error}): it was written by config "
            f"{meta.get('config_hash')}, this run is {self.cfg.config_hash()}.{changed} Fix: resume with the "
            "model settings the run was started with, or start a new --run-dir without --resume"
        )

    def _resume_point(self) -> Path | None:
        return agreed_resume_point(self.rd, self.info, self.rec)

    # --- one optimizer step -------------------------------------------------------------------
    def _step(self, step: int, lr: float, loader: Any, want_stats: bool) -> dict[str, float]:
        """One optimizer step with no host sync (unless NSA stats are collected): loss, grad norm and
        the non-finite flag stay on the device until the next log step reads them."""
        info, rec, t = self.info, self.rec, self.cfg.train
        fault = self.fault
        if self.pacer is not None:
            self.pacer.wait(step + 1, info.rank)
        elif fault is not None and fault.hits(step + 1, info.rank) and fault.arm(self.rd.root, info.rank):
            if fault.kind == "kill":
                kill_self()
            if fault.kind == "stall":
                rec.beat("forward_backward", step)
                stall_forever()
        elif fault is not None and fault.outlives(step + 1, info.rank):
            self.signals.stop_requested.wait(KILL_WAIT_S)  # torchrun's SIGTERM first, then the dead peer
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        loss_sum = torch.zeros((), device=info.device)
        stats: dict[str, float] = {}
        pin = info.device.type == "cuda"
        if self.cudagraphs:  # own .grad buffers, allocated before the first backward (then zeroed in place)
            own_grads(self.params)
        for micro in range(t.grad_accum):
            rec.beat("data_wait", step)
            x, y = self._pending.pop() if self._pending else loader.next_batch()
            if pin:  # page-locked: the copy below runs asynchronously, beside the previous kernels
                x, y = x.pin_memory(), y.pin_memory()
            x = x.to(info.device, non_blocking=True)
            y = y.to(info.device, non_blocking=True)
            rec.beat("forward_backward", step)
            if self.cudagraphs:  # a new iteration: the CUDA graphs' previous outputs may be overwritten
                torch.compiler.cudagraph_mark_step_begin()
            collect = want_stats and micro == 0
            # Compiled blocks cannot write module attributes from inside a checkpointed region (dynamo
            # refuses the side effect and compiles nothing): their stats come from an eager pass.
            side_pass = collect and self.cfg.parallel.compile
            if collect and not side_pass:
                self._set_collect_stats(True)
            with grad_sync(self.wrapped, micro == t.grad_accum - 1):
                with self.autocast():
                    loss = self.wrapped(x, y)
                if fault is not None and fault.kind == "nan" and fault.hits(step + 1, info.rank):
                    loss = loss * float("nan")
                # Backward outside autocast (PyTorch's rule): its ops take the forward's dtypes.
                (loss / t.grad_accum).backward()
            if side_pass:
                stats = self._stats_pass(x)
            elif collect:
                stats = self._read_stats()
                self._set_collect_stats(False)
            # An in-place add into loss_sum, a tensor of this step (the loss is computed outside the
            # compiled blocks, so not a graph-pool output anyway: nothing of a replay is kept).
            loss_sum += loss.detach().float()
        rec.beat("optimizer", step)
        max_norm = t.grad_clip if t.grad_clip > 0 else float("inf")
        gn = torch.nn.utils.clip_grad_norm_(self.wrapped.parameters(), max_norm)
        if hasattr(gn, "full_tensor"):  # FSDP2: a DTensor holding the global norm
            gn = gn.full_tensor()
        # The norm of all-reduced gradients is the same on every rank: all skip the same steps.
        self.stats.add(step + 1, loss_sum / t.grad_accum, gn)
        self.optimizer.step()
        # Own buffers are zeroed in place (one foreach kernel); else freed (set_to_none: less memory
        # between steps, and the next backward writes them without a zeroing pass).
        self.optimizer.zero_grad(set_to_none=not self.cudagraphs)
        return stats

    def _check_finite(self, w: Window) -> None:
        """A non-finite step was skipped on the device; at the log step it stops every rank (exit 1)."""
        if not w.nonfinite:
            return
        self.bad_step = w.first_nonfinite - 1  # the last step before it, as the error event's step
        raise Diverged(
            f"loss {w.loss} / grad norm {w.grad_norm} is not finite at step {w.first_nonfinite} "
            f"({w.nonfinite} of the last {w.steps} steps; their updates were skipped); stopping all ranks "
            "(lower train.lr, check the data, or resume from an earlier checkpoint)"
        )

    def _after_first_step(self, step: int, t0: float) -> None:
        """The first step's loss (one sync, once) and, with parallel.compile, what dynamo compiled."""
        w_loss = float(self.stats.buf[0].item())
        detail: dict[str, Any] = {"seconds_since_start": round(time.time() - t0, 2), "loss": w_loss}
        if self.cfg.parallel.compile:
            counts = compile_counts()
            detail.update(compile_graphs=counts["graphs"], compile_breaks=counts["breaks"])
            reasons = compile_break_reasons()
            self.rec.event(
                "compiled", step=step, backend=self.cfg.parallel.compile_backend, reasons=reasons, **counts
            )
            self.print0(
                f"[nsa]  compile: {counts['graphs']} graphs, {counts['breaks']} graph breaks "
                f"({self.cfg.parallel.compile_backend}, {len(self.model.blocks)} blocks)"
                + (f"; breaks: {'; '.join(reasons)}" if reasons else "")
            )
            if counts["graphs"] == 0:
                raise CompiledNothing(
                    "parallel.compile is true but torch.compile compiled 0 graphs in the first step "
                    f"(graph breaks: {counts['breaks']}; {'; '.join(reasons) or 'no reason recorded'}): the run "
                    "would train uncompiled. Fix: report the break above, or set parallel.compile=false"
                )
        self.rec.event("first_step", step=step, **detail)

    def _optimizer(self) -> torch.optim.Optimizer:
        t = self.cfg.train
        params = [p for p in self.wrapped.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": t.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        # Fused on every device (CPU too): one kernel per step, and it honours `found_inf` (see _train).
        return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=t.eps, fused=True)

    # --- NSA stats (nsa.train.nsastats) ------------------------------------------------------
    def _set_collect_stats(self, on: bool) -> None:
        nsastats.set_collect(self.model, on)

    def _read_stats(self) -> dict[str, float]:
        return nsastats.read(self.model)

    def _stats_pass(self, x: torch.Tensor) -> dict[str, float]:
        return nsastats.side_pass(self.model, x, self.autocast)

    # --- eval, logging, checkpoints -----------------------------------------------------------
    @torch.no_grad()
    def _eval(self, step: int) -> float:
        cfg, info, t = self.cfg, self.info, self.cfg.train
        self.rec.beat("eval", step)
        t0 = time.time()
        # A fresh val loader each time: every eval scores the same held-out batches, so evals compare.
        loader = build_loader(
            cfg.data, seq_len=t.seq_len, batch_size=t.batch_size, rank=info.rank,
            world_size=info.world_size, split="val", seed=t.seed,
        )  # fmt: skip
        self.model.eval()
        total = torch.zeros((), device=info.device)
        try:
            with self._eval_stance():
                for _ in range(t.eval_batches):
                    x, y = loader.next_batch()
                    with self.autocast():
                        total += self.model(x.to(info.device), y.to(info.device)).float()
                    self.rec.beat("eval", step)
        finally:
            loader.close()
            self.model.train()
        val = float(all_reduce_mean(total / t.eval_batches, info).item())
        self.rec.metrics(step, {"loss/val": val, "eval/seconds": time.time() - t0})
        self.rec.event("eval", step=step, loss=val)
        self.print0(f"[nsa] step {step} eval loss {val:.4f}")
        return val

    def _agreed(self, fetch: Any, what: str) -> Any:
        """`fetch()`'s result, or the DataError of any rank on every rank: agreed before step 1.

        A rank whose data failed at its first batch (an empty file of its shard, no held-out document
        for it) exited 2 while its peers waited in step 1's all-reduce until torchrun's SIGTERM: a
        `sigterm` event, a gloo "Connection closed by peer" traceback and exit 1 or 143 beside the
        one real error. Now every rank exits 2 and only the rank that failed says why.
        """
        problem: DataError | None = None
        got = None
        self.rec.beat("data_wait", 0)
        try:
            got = fetch()
        except DataError as e:
            problem = e
        if all_reduce_max(1.0 if problem else 0.0, self.info):
            if problem is not None:
                raise problem
            quiet = DataError(f"another rank found no {what} (it says why)")
            quiet.quiet = True  # type: ignore[attr-defined]
            raise quiet
        return got

    def _val_batch(self) -> Any:
        """One held-out batch read the way the eval reads it (the long-context eval reads rank 0 of 1):
        a corpus with no `val` documents for this rank used to train until the first eval, `eval_every`
        steps later, stop there with a DataError, and again at every resume."""
        cfg, info, t = self.cfg, self.info, self.cfg.train
        rank, world, batch = (info.rank, info.world_size, t.batch_size) if t.eval_every else (0, 1, 1)
        with build_loader(
            cfg.data, seq_len=t.seq_len, batch_size=batch, rank=rank, world_size=world, split="val", seed=t.seed
        ) as probe:  # fmt: skip
            return probe.next_batch()

    def _eval_stance(self) -> contextlib.AbstractContextManager[Any]:
        """Evals run the blocks eager under CUDA graphs: a no-grad forward through graphed blocks would
        compile and record graphs of its own (grad mode and, for the long-context eval, each length
        are new guards) in the graphs' memory pool, for a pass made every `eval_every` steps, and that
        path never ran on a GPU here (bench/graphs_check.py checks training steps). Eager evals cost a
        little time every `eval_every` steps and nothing else."""
        return torch.compiler.set_stance("force_eager") if self.cudagraphs else contextlib.nullcontext()

    def _long_context_eval(self, step: int) -> None:
        """Passkey + loss by position on every rank (FSDP needs them all); rank 0 writes eval/*.json."""
        from nsa.eval.longctx import during_training

        self.rec.beat("eval", step)
        with self._eval_stance():
            acc = during_training(
                self.model, self.cfg, self.info, self.rd.root, self.rec, step, self.autocast
            )
        self.print0(f"[nsa] step {step} passkey accuracy {acc:.2f} (eval/passkey.json)")

    def _log(self, step: int, w: Window, lr: float, tokens: int, tps: float, step_time: float, loader: Any,
             nsa_stats: dict[str, float]) -> None:  # fmt: skip
        world = self.info.world_size
        rec: dict[str, Any] = {
            "loss": w.loss, "lr": lr, "grad_norm": w.grad_norm, "tokens_per_s": tps, "step_time": step_time,
            "tokens": tokens, "loss/train": w.loss, "loss/train_window_mean": w.loss_mean, "optim/lr": lr,
            "optim/grad_norm": w.grad_norm, "optim/grad_norm_window_mean": w.grad_norm_mean,
            "throughput/tokens_per_s": tps, "throughput/tokens_per_s_per_gpu": tps / world,
            "throughput/step_time_s": step_time, "throughput/tokens_seen": tokens,
            "throughput/flops_per_token": self.flops["flops_per_token"],
        }  # fmt: skip
        if self.peak:
            rec["throughput/mfu"] = tps * self.flops["flops_per_token"] / (self.peak[1] * world)
        if self.info.device.type == "cuda":
            rec["memory/max_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
            rec["memory/max_reserved_gb"] = torch.cuda.max_memory_reserved() / 2**30
        rec["memory/rss_peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        with contextlib.suppress(Exception):
            ds = loader.stats()
            rec["data/fetch_wait_s"] = float(ds.get("fetch_wait_s", 0.0))
            rec["data/dropped_tokens"] = float(ds.get("dropped_tokens", 0))
        rec.update(nsa_stats)
        self.rec.metrics(step, rec)
        if self.verbose:
            self.print0(
                f"[nsa] step {step}/{self.cfg.train.steps} loss {w.loss:.4f} lr {lr:.3e} gnorm {w.grad_norm:.3f} "
                f"tok/s {tps:,.0f} ({tps / world:,.0f}/gpu) step {step_time * 1000:.0f}ms"
                + (f" mfu {rec['throughput/mfu']:.1%}" if self.peak else "")
            )

    def _save(self, step: int, tokens: int, loader: Any) -> None:
        self.rec.beat("checkpoint", step)
        t0 = time.time()
        meta = {"tokens": tokens, "world_size": self.info.world_size, "config_hash": self.cfg.config_hash()}
        # Every rank's file carries every stream's position: a resume on another world size deals
        # them out again from any one file (datastreams.py).
        streams = [s for part in all_gather_objects(loader.local_states(), self.info) for s in part]
        mine = loader.local_states()[0]["loader"]
        args = (self.rd, self.info, step, self.wrapped, self.optimizer, meta,
                {"loader": mine, "data_streams": streams}, self.cfg.train.keep_last)  # fmt: skip
        beat = lambda: self.rec.beat("checkpoint", step)  # noqa: E731
        if self.saver is None:
            path = ckpt.save(*args, progress=beat, fault=self._ckpt_fault(step))
            self._saved(step, path, time.time() - t0)
            return
        self.saver.poll(block=True)  # at most one save in flight: the previous one first
        snap = ckpt.snapshot(*args, progress=beat, private=True)
        snap.fault = self._ckpt_fault(step)
        self.saver.start(snap, t0)

    def _ckpt_fault(self, step: int) -> str | None:
        f, rank = self.fault, self.info.rank
        if f is None or f.kind != "ckpt" or not f.hits(step, rank) or not f.arm(self.rd.root, rank):
            return None
        return f"checkpoint write failed (injected by NSA_FAULT=ckpt:step={step}) on rank {rank}"

    def _saved(self, step: int, path: Path, seconds: float) -> None:
        self.rec.event(
            "checkpoint", step=step, path=str(path.relative_to(self.rd.root)), seconds=round(seconds, 2)
        )

    def _finish_save(self) -> None:
        """Wait for the save in flight (SIGTERM, end of training): published, or its failure raised."""
        if self.saver is not None and self.saver.flight is not None:
            self.rec.beat("checkpoint", self.saver.flight.snap.step)
            self.saver.poll(block=True)

    # --- boot ---------------------------------------------------------------------------------
    def _boot_files(self, n_params: int, vocab: int, bf16: bool, loader: Any, ckpt_dir: Path | None) -> None:
        cfg, info = self.cfg, self.info
        try:
            data_desc = loader.describe()
        except Exception:
            data_desc = cfg.data.source
        lines = boot.banner(
            cfg, info, config_path=self.config_path, n_params=n_params, vocab=vocab, bf16=bf16, fsdp=self.fsdp,
            flops=self.flops, peak=self.peak, data_desc=data_desc, malloc_note=self.malloc_note,
            run_dir=self.rd.root, resume=ckpt_dir.name if ckpt_dir else "no",
        )  # fmt: skip
        self.print0(boot.format_banner(lines))
        extra = {
            "config_path": self.config_path,
            "params": n_params,
            "vocab_size": vocab,
            "flops": self.flops,
        }
        boot.write_boot_files(self.rd, cfg, info, lines, extra)
