"""`up` and `doctor`, the multi-GPU preflight: run nsa.train.netcheck under torchrun on every node at
once, with a wall-clock timeout, and turn a hang or an error into the NCCL settings to try.

Owns the command line (the profile's env, the run's torchrun shape: --standalone on one node, c10d
rendezvous on node 0 for several) and the reading of its `NETCHECK {...}` line. It must not import
torch (the host runs the check) or start the run.
"""

from __future__ import annotations

import json
import shlex
import threading
from typing import Any

from launcher.config.profiles import Profile
from launcher.core.errors import RuntimeFailure

TIMEOUT_S = 120.0
NCCL_FIX = (
    "try, one at a time, with `--env`: NCCL_P2P_DISABLE=1 (PCIe GPUs without NVLink: a broken P2P path "
    "hangs), NCCL_IB_DISABLE=1 (no InfiniBand), NCCL_SOCKET_IFNAME=<the interface the nodes share, e.g. "
    "eth0> (multi-node), NCCL_DEBUG=INFO to see where it stops; on CPU (gloo): GLOO_SOCKET_IFNAME"
)


def wanted(profile: Profile) -> bool:
    """More than one GPU, or more than one node: the collective is worth checking before training."""
    return profile.nodes > 1 or (profile.device == "cuda" and profile.nproc_per_node > 1)


def command(profile: Profile, python: str, workdir: str, env: dict[str, str], node: int, rdzv: str | None,
            mb: float, timeout: float) -> str:  # fmt: skip
    argv = [python, "-m", "torch.distributed.run", "--nnodes", str(profile.nodes), "--nproc-per-node",
            str(profile.nproc_per_node)]  # fmt: skip
    if profile.nodes == 1:
        argv += ["--standalone"]
    else:
        argv += ["--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint", str(rdzv),
                 "--rdzv-id", "netcheck"]  # fmt: skip
    argv += ["-m", "nsa.train.netcheck", "--mb", str(mb), "--timeout", str(int(timeout))]
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    # `timeout -k`: a hung collective must not outlive the check (SIGKILL 5 s after SIGTERM).
    return (
        f"cd {shlex.quote(workdir)} && env PYTHONPATH={shlex.quote(workdir)} {exports} "
        f"timeout -k 5 {int(timeout)} {shlex.join(argv)} 2>&1"
    )


def run_check(
    transports: list[Any], pythons: list[str], workdirs: list[str], profile: Profile, env: dict[str, str],
    rdzv: str | None = None, mb: float = 64.0, timeout: float = TIMEOUT_S,
) -> dict[str, Any]:  # fmt: skip
    """Run the all-reduce on every node at once. Returns rank 0's result; raises RuntimeFailure."""
    outs: list[Any] = [None] * len(transports)

    def one(i: int) -> None:
        cmd = command(profile, pythons[i], workdirs[i], env, i, rdzv, mb, timeout)
        try:
            res = transports[i].run(cmd, timeout=timeout + 30, check=False)
            outs[i] = (res.exit_code, res.stdout + res.stderr)
        except Exception as e:
            outs[i] = (None, f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(transports))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout + 60)
    results = []
    for i, o in enumerate(outs):
        code, text = o if o is not None else (None, "no answer")
        parsed = parse_lines(text or "")
        results.append((i, code, parsed, text or ""))
    for i, code, parsed, text in results:
        bad = [p for p in parsed if not p.get("ok")]
        if code in (124, 137) or (code != 0 and not bad):
            what = "hung" if code in (124, 137) else f"failed (exit {code})"
            tail = "\n".join(f"    {ln}" for ln in text.strip().splitlines()[-8:])
            raise RuntimeFailure(
                f"the all-reduce preflight on node {i} ({transports[i].label}) {what} within {timeout:.0f} s "
                f"across {profile.world_size} ranks; last lines:\n{tail}",
                NCCL_FIX,
            )
        if bad:
            raise RuntimeFailure(
                f"the all-reduce preflight failed on node {i} ({transports[i].label}), rank {bad[0].get('rank')}: "
                f"{bad[0].get('error')}",
                NCCL_FIX,
            )
    ok = next((p for _, _, parsed, _ in results for p in parsed if p.get("ok")), None)
    if ok is None:
        raise RuntimeFailure("the all-reduce preflight printed no result", NCCL_FIX)
    return ok


def parse_lines(text: str) -> list[dict[str, Any]]:
    """Every `NETCHECK {...}` object in the output, also two ranks' glued on one line (nsa.train.netcheck
    wrote a line's text and its newline apart before its `_say`; a host not yet synced may still); text
    that is not one is skipped."""
    dec = json.JSONDecoder()
    out = []
    for part in text.split("NETCHECK ")[1:]:
        try:
            obj, _ = dec.raw_decode(part)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def describe(r: dict[str, Any]) -> str:
    mb = r["bytes"] / (1 << 20)
    return (
        f"all-reduce ok across {r['world_size']} ranks ({r['backend']}): {mb:.0f} MiB in "
        f"{r['seconds'] * 1e3:.1f} ms, bus bandwidth {r['busbw_gbps']:.2f} GB/s (algbw {r['algbw_gbps']:.2f})"
    )
