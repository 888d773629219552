"""Release numbers of installed packages, torch-free: nsa-train's validation compares torch's and
triton's versions before it imports either (a refusal must not wait for torch to load)."""

from __future__ import annotations


def release(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version string: '2.6.0+cu124' -> (2, 6, 0), '3.6.0rc1' -> (3, 6, 0)."""
    out = []
    for part in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        out.append(int(digits))
    return tuple(out)
