"""The all-reduce preflight's output parser: every `NETCHECK {...}` object, also when two ranks'
lines were glued together on one line (CI, 2026-11-27: rank 1's object followed by rank 0's)."""

from __future__ import annotations

import json

from launcher.launch.netcheck import parse_lines


def test_glued_and_separate_lines_all_parse_and_noise_is_skipped():
    r1 = {"ok": False, "rank": 1, "error": "RuntimeError: [enforce fail at device.cc:84] ifa != nullptr."}
    r0 = {"ok": False, "rank": 0, "error": "RuntimeError: Unable to find address for: nonexistent0"}
    ok = {"ok": True, "world_size": 2, "bytes": 1048576}
    text = (
        "W1127 torchrun warning\n"
        f"NETCHECK {json.dumps(r1)}NETCHECK {json.dumps(r0)}\n\n"
        f"[rank0]: NETCHECK {json.dumps(ok)}\n"
        "NETCHECK {truncated\n"
    )
    assert parse_lines(text) == [r1, r0, ok]
    assert parse_lines("") == [] and parse_lines("no result at all\n") == []
