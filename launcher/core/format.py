"""How the launcher writes numbers, durations, ages and states for people: the one formatter.

`status`, `runs`, `up --wait` and every dashboard cell write their numbers through this module, so
181342 tokens/s reads "181k" everywhere, an ETA of 5421 s reads "1h30m" and a heartbeat 483 s old
reads "8m ago". It computes no number itself (ages, ETAs and rates come from the agent's snapshot)
and must stay free of I/O and of Textual; it imports rich only for the few styled `Text` cells.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from rich.text import Text

MISSING = "–"
STATE_STYLE = {
    "starting": "bold cyan",
    "restarting": "bold cyan",
    "running": "bold green",
    "stalled": "bold yellow",
    "finished": "bold blue",
    "failed": "bold red",
    "killed": "bold grey70",  # a deliberate stop: neutral, not an error colour
    "lost": "bold white on red",
}
ALERT_STATES = ("stalled", "failed", "lost")
# A run in one of these states has processes on its host (and may have a TensorBoard).
LIVE_STATES = ("starting", "restarting", "running", "stalled")
# A run in one of these states has no live heartbeat: the age of its last one tells nothing.
ENDED_STATES = ("finished", "failed", "killed", "lost")
SPARK_CHARS = "▁▂▃▄▅▆▇█"
# Clock skew between a host and the agent's read of its clock: an age down to this much below zero
# is "just now"; anything further below zero is a wrong clock, shown as unknown.
SKEW_S = 60.0
_UNITS = ("", "k", "M", "B", "T")


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def number(v: Any) -> str:
    """A count or rate for a person: 952, 6.8k, 181k, 3.4M (three significant digits at most)."""
    f = _num(v)
    if f is None:
        return MISSING
    sign, f = ("-" if f < 0 else ""), abs(f)
    if round(f) < 1000:
        return sign + (f"{f:.0f}" if f >= 100 or f == int(f) else f"{f:.3g}")
    for i, unit in enumerate(_UNITS[1:], start=1):
        val = f / 1000**i
        if round(val, 1) < 10:
            return f"{sign}{val:.1f}{unit}"
        if round(val) < 1000 or i == len(_UNITS) - 1:
            return f"{sign}{val:.0f}{unit}"
    return sign + f"{f:.3g}"  # pragma: no cover (the loop always returns)


rate = number


def ticks(values: list[float], si: bool = True) -> list[str]:
    """Labels for one chart axis, all in the same unit with the same decimals, so they line up and
    do not change form from one draw to the next: 5.0k 7.5k 10.0k; 2.5 3.0 3.5; 0 50 100.
    Zero is written 0."""
    if not values:
        return []
    div, suffix = 1.0, ""
    if si:
        big = max(abs(v) for v in values)
        for i, u in enumerate(_UNITS):
            if big < 1000 ** (i + 1) or i == len(_UNITS) - 1:
                div, suffix = float(1000**i), u
                break
    scaled = [v / div for v in values]
    decimals = next(
        (d for d in range(7) if all(abs(round(s, d) - s) < 1e-9 * max(1.0, abs(s)) for s in scaled)), 6
    )
    return ["0" if s == 0 else f"{s:.{decimals}f}{suffix}" for s in scaled]


def size(n_bytes: Any) -> str:
    """A size in bytes for a person, in powers of 1000 like the network and disk tools: 512 B, 1.2 GB."""
    f = _num(n_bytes)
    if f is None or f < 0:
        return MISSING
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if f < 999.95 or unit == "TB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1000
    return MISSING  # pragma: no cover (the loop always returns)


def tok_rate(v: Any) -> str:
    """A tokens/s figure with its unit, as the CLI prints it: 1.8k tok/s."""
    return f"{number(v)} tok/s"


def duration(seconds: Any) -> str:
    """Elapsed time or ETA: 20ms, 2.5s, 42s, 6m40s, 1h30m, 3d00h. Negative or unknown: "–"."""
    s = _num(seconds)
    if s is None or s < 0:
        return MISSING
    if 0 < s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def ago(seconds: Any) -> str:
    """How long ago: 3s ago, 8m ago, 1h30m ago, 3d ago. Small negative ages (clock skew) are 0s."""
    s = _num(seconds)
    if s is None or s < -SKEW_S:
        return MISSING
    s = max(0.0, s)
    if s < 60:
        return f"{int(s)}s ago"
    if s < 3600:
        return f"{int(s // 60)}m ago"
    if s < 48 * 3600:
        h, m = divmod(int(s // 60), 60)
        return f"{h}h{m:02d}m ago"
    return f"{int(s // 86400)}d ago"


def loss(v: Any) -> str:
    """A loss to four significant digits: 2.836."""
    f = _num(v)
    return MISSING if f is None else f"{f:.4g}"


def integer(v: Any) -> str:
    f = _num(v)
    return MISSING if f is None else str(int(f))


def step_total(step: Any, total: Any) -> str:
    """Steps stay exact (a person types them into --set): 1200/20000."""
    return f"{integer(step)}/{integer(total)}" if _num(total) else integer(step)


def mib(used: Any, total: Any) -> str:
    """GPU memory in GiB from MiB: 59.8/80G."""
    u, t = _num(used), _num(total)
    return "n/a" if u is None or t is None else f"{u / 1024:.1f}/{t / 1024:.0f}G"


def mib_one(v: Any) -> str:
    """One amount of GPU memory given in MiB: 512M, 59.8G."""
    f = _num(v)
    if f is None:
        return "n/a"
    return f"{f:.0f}M" if f < 1024 else f"{f / 1024:.1f}G"


def unit(v: Any, spec: str, suffix: str) -> str:
    f = _num(v)
    return "n/a" if f is None else f"{f:{spec}}{suffix}"


def state_label(st: dict[str, Any]) -> str:
    """The state, with the exit code when it is not the expected one and the restarts the host made
    after crashes: "failed (exit 1)", "running (restarts 1/3)"; a killed run shows the step of its
    last checkpoint instead of an exit code: "killed (saved step 1200)"."""
    state, code = str(st.get("state") or "?"), st.get("exit_code")
    notes = []
    if state == "killed":
        # A deliberate stop: torchrun's exit code (1, or 143) says nothing; the checkpoint it saved
        # on the way out does.
        saved = [
            e.get("step")
            for e in st.get("events") or []
            if isinstance(e, dict) and e.get("kind") == "checkpoint"
        ]
        if saved:
            notes.append(f"saved step {saved[-1]}")
    elif code is not None and not (state == "finished" and code == 0):
        notes.append(f"exit {code}")
    r = st.get("restarts")
    if isinstance(r, dict) and r.get("count"):
        notes.append(f"restarts {r['count']}/{MISSING if r.get('max') is None else r['max']}")
    return f"{state} ({', '.join(notes)})" if notes else state


def lost_detail(st: dict[str, Any], now: float | None = None) -> str:
    """Where a lost run was when its host last answered: "last contact 2m ago at step 1200 (running)";
    "" when its host never answered from here."""
    t = _num(st.get("last_contact"))
    if t is None:
        return "no contact with its host from here yet"
    age = ago((time.time() if now is None else now) - t)
    step, state = st.get("last_step"), st.get("last_state")
    return f"last contact {age} at step {integer(step)}" + (f" ({state})" if state else "")


def resume_line(st: dict[str, Any], now: float | None = None) -> str:
    """What a lost run can be resumed from, and the command (launcher/run/control.py resume_advice):
    "the mirror holds step-00000012 (saved 5m ago): if its host is gone, `nsa-launch restart --run R
    --host NEW` resumes it on a host you rent"; "" when there is nothing to say (not lost, finished)."""
    r = st.get("resume") or {}
    cmd, run = r.get("command"), st.get("run")
    if not cmd:
        return ""
    if not r.get("checkpoint"):
        return (
            f"the mirror holds no checkpoint of {run}: nothing to resume elsewhere; if its host comes back, "
            f"`{cmd}` copies its newest one here (`nsa-launch watch --run {run}` keeps doing so)"
        )
    saved = _num(r.get("saved_at"))
    when = "" if saved is None else f", saved {ago((time.time() if now is None else now) - saved)}"
    held = f"the mirror holds {r['checkpoint']} (step {integer(r.get('step'))}{when})"
    if cmd.startswith("nsa-launch watch"):
        return f"{held}: `{cmd}` replaces the pod once it is lost for --lost-after seconds and resumes there"
    return f"{held}: if its host is gone, `{cmd}` resumes it on a host you rent (--host once per node)"


def pod_cost(st: dict[str, Any]) -> str:
    """A rented run's pod, its price and what it cost so far ("pod p-1 $1.20/h $3.40"); "" when none."""
    if not st.get("pod_id"):
        return ""
    price, cost = _num(st.get("price_hr")), _num(st.get("cost_usd"))
    return (
        f"pod {st['pod_id']} {'$?' if price is None else f'${price:.2f}'}/h "
        f"{'$?' if cost is None else f'${cost:.2f}'}"
    )


def newest_heartbeat(st: dict[str, Any]) -> str:
    """The newest heartbeat's age, only while the run lives: an ended run's beat is not news."""
    if st.get("state") in ENDED_STATES:
        return MISSING
    ages = st.get("heartbeat_age_s")
    vals = (
        [a for a in (_num(v) for v in (ages or {}).values()) if a is not None]
        if isinstance(ages, dict)
        else []
    )
    return ago(min(vals)) if vals else MISSING


def event_value(key: str, v: Any) -> str:
    """One value of an events.jsonl `detail` for a person: loss=2.836, wall_s=4.4s, params=152k."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), default=str)
    if not isinstance(v, (int, float)):
        return str(v)
    if "loss" in key:
        return loss(v)
    if "seconds" in key or (key.endswith("_s") and not key.endswith("per_s")):
        return duration(v)
    if isinstance(v, int) and abs(v) < 10_000:
        return str(v)  # small counts (steps, ranks, world sizes) stay exact
    if isinstance(v, float) and abs(v) < 1000:
        return f"{v:.4g}"
    return number(v)


def event_detail(ev: dict[str, Any]) -> str:
    """An event's detail (or its extra keys) as `key=value` pairs with human values."""
    d = ev.get("detail")
    if not (isinstance(d, dict) and d):
        d = {k: v for k, v in ev.items() if k not in ("kind", "time", "step", "rank", "detail")}
    return " ".join(f"{k}={event_value(k, v)}" for k, v in sorted(d.items()))


# --- styled cells (rich Text: never parsed as markup, so run output cannot break rendering) ------
def state_text(state: str, label: str | None = None) -> Text:
    return Text(label or state or "?", style=STATE_STYLE.get(state, "bold"))


def progress(step: Any, total: Any, width: int = 10) -> Text:
    s, t = _num(step), _num(total)
    if s is None:
        return Text(MISSING)
    if not t:
        return Text(f"{int(s)}")
    frac = min(max(s / t, 0.0), 1.0)
    filled = round(frac * width)
    out = Text(f"{int(s)}/{int(t)} ")
    out.append("█" * filled, style="green")
    out.append("░" * (width - filled), style="grey50")
    out.append(f" {frac * 100:3.0f}%")
    return out


def heartbeat(st: dict[str, Any], per_rank: bool) -> Text:
    """Newest heartbeat age, or every rank's when `per_rank`; "–" once the run has ended."""
    ages = st.get("heartbeat_age_s")
    if st.get("state") in ENDED_STATES or not isinstance(ages, dict) or not ages:
        return Text(MISSING)
    pairs = sorted(((int(k), _num(v)) for k, v in ages.items()), key=lambda kv: kv[0])
    if per_rank:
        return Text(" ".join(f"r{r}:{ago(a).removesuffix(' ago')}" for r, a in pairs))
    vals = [a for _, a in pairs if a is not None]
    if not vals:
        return Text(MISSING)
    return Text(ago(min(vals)), style="yellow" if max(vals) > 60 else "")


def sparkline(values: list[float], lo: float | None = None, hi: float | None = None) -> str:
    """Block-character sparkline; `lo`/`hi` fix the scale (0–100 % for utilisation) when given."""
    if not values:
        return ""
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    span = hi - lo
    out = []
    for v in values:
        frac = 0.0 if span <= 0 else (min(max(v, lo), hi) - lo) / span
        out.append(SPARK_CHARS[min(int(frac * len(SPARK_CHARS)), len(SPARK_CHARS) - 1)])
    return "".join(out)


def clock_time(t: Any) -> str:
    """UTC wall time HH:MM:SS: fixed across time zones, so recorded screens compare equal anywhere."""
    f = _num(t)
    if f is None:
        return "--:--:--"
    return time.strftime("%H:%M:%S", time.gmtime(f))


def local_time(t: Any) -> str:
    """Local date and minute, for when a run was created: 2026-11-23 20:40."""
    f = _num(t)
    return MISSING if f is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(f))
