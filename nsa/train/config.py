"""The training config schema: typed, validated, torch-free.

This module owns the YAML schema of a training run (sections `model`, `data`, `train`, `parallel`, `eval`, `ckpt`,
`telemetry`), its cross-checks, `--set section.key=value` overrides, the resolved-config hash and
YAML dump. It must never import torch (nor anything that does): the launcher validates configs and
overrides here, on a laptop without torch, before it touches a host. Every failure is a
`ConfigError` naming the file, the key, the bad value and the fix. The `data` section is owned by
`nsa.data` (its `DataConfig`); this module only embeds it.

    python -c "from nsa.train.config import load_config; print(load_config('configs/tiny.yaml').to_yaml())"
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nsa import yamlsafe
from nsa.data.config import DataConfig, vocab_size_for


class ConfigError(ValueError):
    """A bad config: carries where (file, key), what (value) and how to fix it; exit code 2."""

    def __init__(self, file: str, key: str, value: Any, problem: str, fix: str):
        self.file = file
        self.key = key
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(str(self))

    @property
    def summary(self) -> str:
        """Where and what, without the fix (for callers that print the fix on a line of its own)."""
        where = f"{_clip(self.file, 400)}: {_clip(str(self.key))}" if self.key else _clip(self.file, 400)
        shown = f" = {_clip(repr(self.value))}" if self.value is not None else ""
        return f"config error in {where}{shown}: {_clip(self.problem, 600)}"

    def __str__(self) -> str:
        return f"{self.summary}. Fix: {_clip(self.fix, 600)}"


SHOWN_MAX = 200


def _clip(text: str, limit: int = SHOWN_MAX) -> str:
    """At most `limit` characters of a bad value in a message (an expanded alias once made 226 MB)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class _Strict(BaseModel):
    # allow_inf_nan=False: `train.lr=1e400` reads as inf and passed `gt=0`; no knob wants a non-finite value.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


# --- model --------------------------------------------------------------------------------------
# Bounds of the model's shape: what fits 8 x 80 GB when training with AdamW in fp32 (16 bytes a
# parameter: weights, gradients, two moments) is about 40e9 parameters; no single dimension of such a
# model comes near these. A typo (dim 1e12) is refused here instead of in an allocation on the pod.
MAX_DIM = 65536
MAX_VOCAB = 1 << 24
TRAIN_BYTES_PER_PARAM = 16
MAX_TRAIN_BYTES = 8 * 80 * 10**9


class NSAConfig(_Strict):
    """Native Sparse Attention geometry (paper notation: l = block_len, d = block_stride,
    l' = sel_block, n = n_sel, w = window)."""

    block_len: int = Field(32, ge=1, description="l: tokens per compression block.")
    block_stride: int = Field(16, ge=1, description="d: stride between compression blocks; must divide l.")
    sel_block: int = Field(64, ge=1, description="l': tokens per selection block; a multiple of l.")
    n_sel: int = Field(
        16, ge=3, description="n: selection blocks attended per query, counting the initial and 2 local ones."
    )
    window: int = Field(512, ge=1, description="w: sliding-window branch width in tokens.")
    compression: Literal["mlp", "mean"] = Field(
        "mlp", description="phi of the paper's Eq. 7: learned MLP over each block, or its mean (cheaper)."
    )
    backend: Literal["auto", "eager", "triton"] = Field(
        "auto",
        description="auto = triton kernels on CUDA, eager (PyTorch) elsewhere; triton needs CUDA "
        "(or TRITON_INTERPRET=1 on CPU, for tests).",
    )

    @model_validator(mode="after")
    def _paper_divisibility(self) -> NSAConfig:
        if self.block_len % self.block_stride:
            raise ValueError(
                f"nsa.block_stride={self.block_stride} must divide nsa.block_len={self.block_len} "
                "(NSA compresses overlapping blocks of l tokens every d tokens, d | l); "
                f"try block_stride={_nearest_divisor(self.block_len, self.block_stride)}"
            )
        if self.sel_block % self.block_len:
            raise ValueError(
                f"nsa.block_len={self.block_len} must divide nsa.sel_block={self.sel_block} "
                "(selection scores are pooled from compression blocks, l | l'); "
                f"try sel_block={max(1, round(self.sel_block / self.block_len)) * self.block_len}"
            )
        return self


TRITON_MAX_HEAD_DIM = 128  # largest head_dim nsa/attention/triton is compiled and checked for


class ModelConfig(_Strict):
    """Llama-style decoder: RMSNorm, RoPE, SwiGLU, grouped-query attention (NSA or dense)."""

    vocab_size: int | None = Field(
        None,
        ge=2,
        le=MAX_VOCAB,
        description="Embedding rows; null = the tokenizer's vocabulary size (from `data`).",
    )
    dim: int = Field(768, ge=8, le=MAX_DIM, description="Residual stream width.")
    n_layers: int = Field(12, ge=1, le=1024, description="Transformer blocks.")
    n_heads: int = Field(12, ge=1, le=1024, description="Query heads.")
    n_kv_heads: int = Field(2, ge=1, le=1024, description="Key/value heads (GQA); must divide n_heads.")
    head_dim: int = Field(64, ge=2, le=1024, description="Per-head width; even (RoPE rotates pairs).")
    ffn_multiple_of: int = Field(
        64, ge=1, description="SwiGLU hidden width is 8/3*dim rounded up to a multiple of this."
    )
    ffn_hidden: int | None = Field(
        None, ge=1, le=4 * MAX_DIM, description="Explicit SwiGLU hidden width; overrides the rule."
    )
    attention: Literal["nsa", "dense"] = Field(
        "nsa", description="nsa = Native Sparse Attention; dense = baseline."
    )
    nsa: NSAConfig = Field(default_factory=NSAConfig, description="NSA geometry (ignored for dense).")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base frequency.")
    norm_eps: float = Field(1e-5, gt=0, description="RMSNorm epsilon.")
    tie_embeddings: bool = Field(True, description="Share the input embedding with the output head.")
    init_std: float = Field(0.02, gt=0, description="Std of the normal init of linear and embedding weights.")

    @model_validator(mode="after")
    def _heads(self) -> ModelConfig:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model.n_kv_heads={self.n_kv_heads} must divide model.n_heads={self.n_heads} "
                "(each KV head serves a whole group of query heads)"
            )
        if self.head_dim % 2:
            raise ValueError(f"model.head_dim={self.head_dim} must be even (RoPE rotates pairs of channels)")
        if self.attention == "nsa" and self.nsa.backend != "eager" and self.head_dim > TRITON_MAX_HEAD_DIM:
            # The triton kernels pad head_dim to a power of two; past 128 their tiles were never
            # compiled and checked (gpucheck), and auto picks them on CUDA.
            raise ValueError(
                f"model.head_dim={self.head_dim} is more than the triton NSA kernels serve "
                f"({TRITON_MAX_HEAD_DIM}; any even head_dim up to it is padded to a power of two). "
                f"Fix: head_dim <= {TRITON_MAX_HEAD_DIM}, or `model.nsa.backend: eager`"
            )
        return self

    def approx_params(self, vocab: int) -> int:
        """Parameters of the linear and embedding weights (norms and NSA gates are small beside them)."""
        attn = self.dim * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        ffn = 3 * self.dim * self.ffn_width()
        emb = vocab * self.dim * (1 if self.tie_embeddings else 2)
        return self.n_layers * (attn + ffn) + emb

    def ffn_width(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        m = self.ffn_multiple_of
        return m * math.ceil(int(8 * self.dim / 3) / m)


# --- optimisation / loop ------------------------------------------------------------------------
class TrainSection(_Strict):
    """The optimisation loop. `steps` counts optimizer steps (each = grad_accum micro-batches)."""

    steps: int = Field(
        ..., ge=1, le=10**9, description="Optimizer steps to train for (not micro-batches; at most 1e9)."
    )
    seq_len: int = Field(..., ge=2, le=1 << 22, description="Tokens per sequence (at most 4M).")
    batch_size: int = Field(..., ge=1, le=1 << 16, description="Sequences per micro-batch per rank.")
    grad_accum: int = Field(
        1, ge=1, le=4096, description="Micro-batches accumulated per optimizer step (at most 4096)."
    )
    global_batch: int | None = Field(
        None,
        ge=1,
        description="Optional check: sequences per optimizer step = batch_size x world_size x grad_accum.",
    )
    lr: float = Field(3e-4, gt=0, le=10, description="Peak learning rate (after warmup; at most 10).")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Cosine floor as a fraction of lr.")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup, in optimizer steps.")
    weight_decay: float = Field(0.1, ge=0, description="AdamW decoupled decay on matrices (not norms).")
    beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1.")
    beta2: float = Field(0.95, ge=0, lt=1, description="AdamW beta2.")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    grad_clip: float = Field(1.0, ge=0, description="Global grad-norm clip; 0 disables clipping.")
    seed: int = Field(1337, description="Seed for init and data order (ranks derive theirs from it).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto = cuda when available, else cpu."
    )
    dtype: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="Compute dtype: auto = bf16 autocast on CUDA, fp32 on CPU. Weights stay fp32."
    )
    log_every: int = Field(10, ge=1, description="Optimizer steps between metrics.jsonl records.")
    eval_every: int = Field(0, ge=0, description="Optimizer steps between held-out evals; 0 = never.")
    eval_batches: int = Field(4, ge=1, description="Micro-batches per held-out eval (per rank).")
    save_every: int = Field(0, ge=0, description="Optimizer steps between checkpoints; 0 = only at the end.")
    save_final: bool = Field(True, description="Write a checkpoint when training ends.")
    keep_last: int = Field(3, ge=1, description="Complete checkpoints kept; older ones are deleted.")

    @model_validator(mode="after")
    def _warmup(self) -> TrainSection:
        if self.warmup_steps > self.steps:
            raise ValueError(
                f"train.warmup_steps={self.warmup_steps} exceeds train.steps={self.steps}; "
                "lower warmup_steps or raise steps"
            )
        return self


class ParallelConfig(_Strict):
    """How the model is spread over ranks; applied in this order: checkpointing, compile, DDP/FSDP."""

    strategy: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="ddp = replicate + all-reduce; fsdp = FSDP2 fully_shard per block. Unused at world 1.",
    )
    activation_checkpointing: Literal["none", "selective", "full"] = Field(
        "none",
        description="Recompute in backward: none; selective = every ac_every-th block; full = every block. "
        "(The old booleans still load: true = full, false = none.)",
    )
    ac_every: int = Field(2, ge=1, description="selective checkpointing: checkpoint every k-th block.")
    compile: bool = Field(
        False, description="torch.compile each block (inductor; CPU too); 0 graphs compiled is an error."
    )
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="torch.compile backend: inductor (fast code), aot_eager/eager (debugging)."
    )
    compile_mode: Literal["default", "reduce-overhead", "auto"] = Field(
        "default",
        description="torch.compile mode: default; reduce-overhead = CUDA graphs per block (a block's "
        "launches replayed by one graph launch: no host issue cost; inductor, CUDA, one rank; gradient "
        "accumulation in trainer-owned .grad buffers); auto = reduce-overhead where all of that holds "
        "and activation_checkpointing is none, else default (the boot banner's world line says which).",
    )

    @model_validator(mode="after")
    def _cudagraphs(self) -> ParallelConfig:
        if self.compile_mode == "reduce-overhead" and not (
            self.compile and self.compile_backend == "inductor"
        ):
            raise ValueError(
                f"parallel.compile_mode=reduce-overhead records CUDA graphs of inductor's compiled blocks, but "
                f"parallel.compile={str(self.compile).lower()} and parallel.compile_backend={self.compile_backend}; "
                "set parallel.compile=true and parallel.compile_backend=inductor, or parallel.compile_mode=default "
                "(or auto)"
            )
        return self

    def resolved_compile_mode(self, device_type: str, world_size: int) -> str:
        """The torch.compile mode the blocks get on this device and world: `auto` is reduce-overhead
        where CUDA graphs are known to work for this trainer (inductor on CUDA, one rank, no activation
        checkpointing: what bench/graphs_check.py ran on the H100), else default."""
        if self.compile_mode != "auto":
            return self.compile_mode
        ok = self.compile and self.compile_backend == "inductor" and device_type == "cuda" and world_size == 1
        ok = ok and self.activation_checkpointing == "none"  # graphs with recomputation: never run on a GPU
        return "reduce-overhead" if ok else "default"

    @field_validator("activation_checkpointing", mode="before")
    @classmethod
    def _ac_bool(cls, v: Any) -> Any:
        # Configs written before the choice existed said true/false: keep them loading, same meaning.
        return {True: "full", False: "none"}.get(v, v) if isinstance(v, bool) else v

    timeout_s: float = Field(
        600.0, gt=0, description="Process-group timeout: rendezvous/init and every collective."
    )


class TelemetryConfig(_Strict):
    """What the trainer writes into the run dir besides checkpoints."""

    stall_seconds: float = Field(
        300.0, gt=0, description="No progress for this long -> stack dump + `stalled` event (watchdog)."
    )
    stall_abort: bool = Field(False, description="After a stall dump, exit the rank so torchrun tears down.")
    tensorboard: bool = Field(True, description="Write TensorBoard scalars under tb/.")
    nsa_stats_every: int = Field(
        0, ge=0, description="Optimizer steps between NSA gate/selection stats; 0 = same as train.log_every."
    )


class EvalConfig(_Strict):
    """Long-context evaluation during training (the same as `nsa-eval`; see docs/training.md)."""

    long_context_every: int = Field(
        0, ge=0, description="Optimizer steps between passkey + loss-by-position evals; 0 = never."
    )
    passkey_lengths: list[Annotated[int, Field(ge=128)]] = Field(
        default_factory=lambda: [1024],
        min_length=1,
        description="Context lengths (>= 128 tokens) of the passkey eval.",
    )
    passkey_depths: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: [0.1, 0.5, 0.9],
        description="Where the key sits, as a fraction of the context.",
    )
    passkey_trials: int = Field(4, ge=1, le=1000, description="Passkey prompts per (length, depth).")


class CkptConfig(_Strict):
    """How checkpoints are written (where and when: `train.save_every`, `train.keep_last`)."""

    # `async` is a Python keyword: the field is `async_`, the YAML key `async`.
    async_: bool = Field(
        False,
        alias="async",
        description="Write checkpoints in a background thread; training goes on (docs/training.md).",
    )


class TrainConfig(_Strict):
    """A whole training run."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainSection
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    ckpt: CkptConfig = Field(default_factory=CkptConfig)

    def resolved_vocab_size(self) -> int:
        return self.model.vocab_size if self.model.vocab_size is not None else vocab_size_for(self.data)

    def global_batch(self, world_size: int) -> int:
        return self.train.batch_size * world_size * self.train.grad_accum

    def tokens_per_step(self, world_size: int) -> int:
        return self.global_batch(world_size) * self.train.seq_len

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def to_yaml(self) -> str:
        """The resolved config (every default filled in); loading it back gives the same config."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    def config_hash(self) -> str:
        """12 hex chars of sha256 over the canonical resolved config; equal configs, equal hashes."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# --- loading ------------------------------------------------------------------------------------
def _nearest_divisor(n: int, near: int) -> int:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    return min(divs, key=lambda d: abs(d - near))


def _model_at(root: type[BaseModel], loc: Sequence[Any]) -> list[type[BaseModel]]:
    """The model classes that own the mapping at `loc` (several when a field is a union)."""
    current: list[type[BaseModel]] = [root]
    for part in loc:
        nxt: list[type[BaseModel]] = []
        for m in current:
            f = m.model_fields.get(str(part))
            if f is None:
                continue
            nxt.extend(_model_classes(f.annotation))
        if not nxt:
            return current if not loc else []
        current = nxt
    return current


def _model_classes(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    out: list[type[BaseModel]] = []
    if get_origin(ann) is not None or get_args(ann):
        for a in get_args(ann):
            out.extend(_model_classes(a))
    return out


def _known_keys(loc: Sequence[Any]) -> list[str]:
    keys: list[str] = []
    for m in _model_at(TrainConfig, loc):
        keys.extend(f.alias or k for k, f in m.model_fields.items() if not k.startswith("_"))
    return sorted(set(keys))


def _dotted(loc: Iterable[Any]) -> str:
    return ".".join(str(p) for p in loc)


def _renamed(errors: list[dict]) -> tuple[dict, dict] | None:
    """(unknown, missing) where a key of a section is unknown and close to one of its required keys
    that is missing: a misspelt required key, whose fix is a rename (pydantic names the missing key
    first, which alone would say "add" it)."""
    for m in (e for e in errors if e["type"] == "missing"):
        for x in (e for e in errors if e["type"] == "extra_forbidden"):
            same = tuple(x["loc"][:-1]) == tuple(m["loc"][:-1])
            if same and difflib.get_close_matches(
                str(x["loc"][-1])[:SHOWN_MAX], [str(m["loc"][-1])], cutoff=0.6
            ):
                return x, m
    return None


def _from_validation_error(file: str, err: ValidationError, raw: dict[str, Any]) -> ConfigError:
    errors = err.errors(include_url=False)
    pair = _renamed(errors)
    e = pair[0] if pair else errors[0]
    loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
    key = _dotted(loc)
    value = e.get("input")
    if e["type"] == "extra_forbidden":
        known = _known_keys(loc[:-1])
        section = _dotted(loc[:-1]) or "the top level"
        if pair:
            wanted = _dotted(pair[1]["loc"])
            return ConfigError(
                file, key, value, f"unknown key in {section}, and the required key {wanted} is missing",
                f"rename {key} to {wanted}",
            )  # fmt: skip
        near = difflib.get_close_matches(str(loc[-1])[:SHOWN_MAX], known, n=1, cutoff=0.6)
        hint = f"did you mean {_dotted((*loc[:-1], near[0]))!r}?" if near else "remove it."
        return ConfigError(
            file, key, value, f"unknown key in {section}", f"{hint} Known keys there: {', '.join(known)}"
        )
    if e["type"] == "missing":
        return ConfigError(file, key, None, "required key is missing", f"add `{key}: <value>` to the config")
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "value_error" and (not loc or isinstance(value, dict)):
        # A cross-field check of a whole section: the message names the keys and the fix itself.
        return ConfigError(file, key, None, msg, "change one of the keys named above")
    return ConfigError(file, key, value, msg, f"set {key} to a value that satisfies that{_describe(loc)}")


def _describe(loc: Sequence[Any]) -> str:
    for m in _model_at(TrainConfig, loc[:-1]):
        f = m.model_fields.get(str(loc[-1]))
        if f is not None and f.description:
            return f" ({loc[-1]}: {f.description})"
    return ""


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_KEY_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Any C0/C1 control character, tab included: a --set value is one line of text (a newline in one
# reached launch.sh's command line).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
SET_VALUE_MAX = 4096


def parse_override(text: str) -> tuple[list[str], Any]:
    """`section.key=value` -> (["section", "key"], parsed value); YAML scalars (3, 1e-4, true, null)."""
    if "=" not in text:
        raise ConfigError(
            "--set", text, text, "an override must look like section.key=value", "e.g. --set train.steps=100"
        )
    key, _, raw = text.partition("=")
    if _CONTROL.search(key) or not _KEY_PATH.fullmatch(key.strip(" ")):
        raise ConfigError(
            "--set", key, None, "is not a key path", "keys are letters, digits and '_' joined by '.'"
        )
    key = key.strip(" ")
    ctl = _CONTROL.search(raw)
    if ctl is not None or len(raw) > SET_VALUE_MAX:
        why = f"holds the control character {ctl.group()!r}" if ctl else f"is {len(raw)} characters long"
        raise ConfigError(
            "--set", key, raw, f"the value {why}", f"give one line of at most {SET_VALUE_MAX} characters"
        )
    try:
        value = yamlsafe.load(raw) if raw.strip() else ""
    except yamlsafe.BadYaml as e:
        raise ConfigError("--set", key, raw, e.problem, e.fix) from None
    except yaml.YAMLError as e:
        raise ConfigError(
            "--set", key, raw, f"value is not valid YAML ({e.__class__.__name__})", "quote it"
        ) from None
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads 1e-4 (no dot) as a string; on a command line it is a number
    return key.split("."), value


def _apply_override(raw: dict[str, Any], path: list[str], value: Any, text: str) -> None:
    node = raw
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(
                "--set",
                _dotted(path[: i + 1]),
                child,
                "is a value, not a section",
                f"drop the rest of {text!r}",
            )
        node = child
    node[path[-1]] = value


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key: str, first: int, second: int):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first, self.second = key, first, second


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (plain YAML silently keeps the last:
    a second `steps:` turned a 40-step config into 50000)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKey(str(key), seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    world_size: int | None = None,
    overrides_label: str | None = None,
) -> TrainConfig:
    """Read, override, validate. `path=None` validates overrides alone (no file). Raises ConfigError.

    With `world_size` the global-batch cross-check runs too (the launcher knows it from the profile;
    the trainer from torchrun). `overrides_label` says where the overrides came from in an error's
    source (default "--set K=V ..."; the launcher names a profile's own overrides apart from --set).
    """
    file = str(path) if path is not None else "<no file>"
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            text = yamlsafe.read_text(p)
        except yamlsafe.BadYaml as e:
            raise ConfigError(file, "", None, e.problem, e.fix) from None
        except FileNotFoundError:
            raise ConfigError(
                file, "", None, "file not found", "pass an existing YAML file, e.g. configs/tiny.yaml"
            ) from None
        except OSError as e:
            raise ConfigError(
                file, "", None, f"cannot read ({e.strerror})", "check the path and permissions"
            ) from e
        try:
            loaded = yamlsafe.load(text, _UniqueKeyLoader)  # a SafeLoader subclass, alias budget
        except yamlsafe.BadYaml as e:
            raise ConfigError(file, "", None, e.problem, e.fix) from None
        except DuplicateKey as e:
            raise ConfigError(
                file,
                e.key,
                None,
                f"is given twice (lines {e.first} and {e.second}); YAML would keep the last",
                "delete one of them",
            ) from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ConfigError(file, "", None, f"not valid YAML{where}", "fix the YAML syntax there") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                file,
                "",
                type(loaded).__name__,
                "top level must be a mapping",
                "use sections model:, data:, train:",
            )
        raw = loaded
    for text in overrides:
        keypath, value = parse_override(text)
        _apply_override(raw, keypath, value, text)
    # Overrides are validated in the same pass as the file; name them as the source when one is bad.
    label = overrides_label or f"--set {' '.join(overrides)}"
    source = file if not overrides else f"{file} (with {label})"
    try:
        cfg = TrainConfig.model_validate(raw)
    except ValidationError as e:
        first = _from_validation_error(source, e, raw)
        pair = _renamed(e.errors())
        led = {first.key} | ({_dotted(pair[1]["loc"])} if pair else set())  # said in the first already
        others = sorted({_dotted(x["loc"]) or "(top level)" for x in e.errors()} - led)
        if others:
            first.problem += f" (also wrong: {', '.join(others)})"
        raise first from None
    _cross_checks(cfg, source, world_size)
    return cfg


def _cross_checks(cfg: TrainConfig, source: str, world_size: int | None) -> None:
    t, m = cfg.train, cfg.model
    if world_size is not None:
        if world_size < 1:
            raise ConfigError(
                source, "world_size", world_size, "must be >= 1", "check WORLD_SIZE / the profile"
            )
        got = cfg.global_batch(world_size)
        if t.global_batch is not None and t.global_batch != got:
            fix_accum = t.global_batch / (t.batch_size * world_size)
            fix = (
                f"set train.grad_accum={int(fix_accum)}"
                if fix_accum == int(fix_accum) and fix_accum >= 1
                else "change train.batch_size / train.grad_accum or drop train.global_batch"
            )
            raise ConfigError(
                source,
                "train.global_batch",
                t.global_batch,
                f"but batch_size x world_size x grad_accum = {t.batch_size} x {world_size} x {t.grad_accum} = {got}",
                fix,
            )
    if cfg.parallel.compile_mode == "reduce-overhead" and t.device == "cpu":
        raise ConfigError(
            source,
            "parallel.compile_mode",
            "reduce-overhead",
            "records CUDA graphs, and train.device=cpu has none (inductor would skip them)",
            "set parallel.compile_mode=default, or train.device=cuda",
        )
    if cfg.parallel.compile_mode == "reduce-overhead" and world_size is not None and world_size > 1:
        # Gradient accumulation is safe under CUDA graphs because the trainer owns the .grad buffers
        # (trainer.py `_step`). Across ranks it is unknown: FSDP2 frees and re-gathers each block's
        # unsharded parameters every step while a graph replays fixed addresses (pytorch/pytorch#164264
        # lists what CUDA graphs lack under FSDP2), and DDP's reducer beside the graphs was never run
        # here (no multi-GPU host to check).
        raise ConfigError(
            source,
            "parallel.compile_mode",
            "reduce-overhead",
            f"is for one rank: with world_size={world_size} parallel.strategy={cfg.parallel.strategy} would "
            "run beside CUDA graphs, a combination not known to work (FSDP2's per-step all-gathers, "
            "pytorch/pytorch#164264; DDP's reducer never checked here)",
            "set parallel.compile_mode=default, or auto (reduce-overhead on one GPU, default on several)",
        )
    if t.eval_every and cfg.data.val_fraction == 0:
        raise ConfigError(
            source,
            "data.val_fraction",
            0,
            f"leaves nothing to evaluate, but train.eval_every={t.eval_every}",
            "set train.eval_every=0 (no held-out eval) or data.val_fraction > 0, e.g. 0.05",
        )
    if cfg.eval.long_context_every and cfg.data.val_fraction == 0:
        # Its loss-by-position half reads held-out batches: it failed at the first such eval.
        raise ConfigError(
            source,
            "data.val_fraction",
            0,
            f"leaves no held-out text, but eval.long_context_every={cfg.eval.long_context_every} reads it "
            "(loss by position)",
            "set eval.long_context_every=0 or data.val_fraction > 0, e.g. 0.05",
        )
    try:
        vocab = vocab_size_for(cfg.data)
    except Exception as e:  # the data package names the source and the fix in its own error
        raise ConfigError(
            source, "data", None, f"cannot determine the tokenizer's vocabulary: {e}", "fix data:"
        ) from e
    if m.vocab_size is not None and m.vocab_size < vocab:
        raise ConfigError(
            source,
            "model.vocab_size",
            m.vocab_size,
            f"is smaller than the tokenizer's vocabulary ({vocab}); token ids would overflow the embedding",
            f"set model.vocab_size >= {vocab} or null (auto)",
        )
    params = m.approx_params(m.vocab_size or vocab)
    if params * TRAIN_BYTES_PER_PARAM > MAX_TRAIN_BYTES:
        raise ConfigError(
            source,
            "model",
            None,
            f"has about {params / 1e9:.0f}e9 parameters: training it needs {TRAIN_BYTES_PER_PARAM} bytes a "
            f"parameter (AdamW, fp32), more than the bound of 8 x 80 GB "
            f"(at most {MAX_TRAIN_BYTES // TRAIN_BYTES_PER_PARAM / 1e9:.0f}e9 parameters)",
            "lower model.dim, model.n_layers or the vocabulary",
        )
    if m.attention == "nsa":
        n = m.nsa
        if n.block_len > t.seq_len:
            raise ConfigError(
                source,
                "model.nsa.block_len",
                n.block_len,
                f"is longer than train.seq_len={t.seq_len}: no compression block fits",
                "lower model.nsa.block_len (and block_stride, sel_block) or raise train.seq_len",
            )
