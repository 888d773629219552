"""Env values the launcher must refuse before anything starts (issue 13, item 9): a malformed
NSA_FAULT, non-finite numbers, shell syntax; and TIKTOKEN_CACHE_DIR, which the tokenizer's own
error message tells users to set, is accepted."""

from __future__ import annotations

import pytest

from launcher.config import envspec
from launcher.core.errors import LaunchError


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("NSA_FAULT=bogus", "unknown kind 'bogus'"),
        ("NSA_FAULT=stall:step=x", "bad option"),
        ("NSA_TERM_SAVE_S=nan", "finite"),
        ("NSA_TERM_SAVE_S=0", "(0, 86400]"),
        ("NCCL_DEBUG_FILE=/tmp/$(touch /tmp/pwned)", "'$('"),
        ("NCCL_DEBUG_FILE=/tmp/`id`", "backtick"),
        ("NCCL_DEBUG_FILE=/tmp/a\nexport CONFIG=x", "newline"),
        ("HF_HOME=/a\rb", "carriage return"),
        # your own variables too, whatever their name (docs/env.md)
        ("MY_VAR=$(id)", "'$('"),
        ("WANDB_NOTES=`id`", "backtick"),
    ],
)
def test_bad_values_are_refused_with_the_reason(item: str, needle: str) -> None:
    with pytest.raises(LaunchError) as e:
        envspec.parse_assignments([item])
    assert needle in e.value.fix, e.value.fix


def test_good_values_pass() -> None:
    env = envspec.parse_assignments(
        [
            "NSA_FAULT=kill:step=3:rank=1",
            "NSA_TERM_SAVE_S=90",
            "TIKTOKEN_CACHE_DIR=/data/tiktoken",
            "HF_HOME=/a $b",
        ]
    )
    assert env["TIKTOKEN_CACHE_DIR"] == "/data/tiktoken" and env["HF_HOME"] == "/a $b"
