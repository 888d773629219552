"""Property tests (hypothesis): no name or value that validation accepts can add a line to launch.sh
or escape its quoting. `$` once matched before a trailing newline, so `--env $'X\\n=touch /tmp/x'`
wrote a command of its own into the wrapper (issue 21)."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.config import envspec
from launcher.core.errors import LaunchError
from launcher.host.wrapper import wrapper_script
from launcher.run import registry
from nsa.train.config import ConfigError, parse_override

# Text that favours the characters that matter to a shell and to `$`-anchored regexes.
NASTY = st.text(
    alphabet=st.sampled_from(list("AZaz09_=-.$`'\"\\;|&()<> \t\n\r\x00\x1b\x7f\x85é")) | st.characters(),
    max_size=24,
)
NAMES = st.one_of(NASTY, st.sampled_from(["MYVAR", "WANDB_PROJECT", "NCCL_DEBUG", "OMP_NUM_THREADS"]))
NAMES = st.one_of(NAMES, st.tuples(NAMES, NASTY).map("".join))


def _req(env: dict[str, str], run: str = "r", argv: list[str] | None = None) -> dict:
    return {
        "run": run,
        "run_dir": "/tmp/runs/" + run,
        "workdir": "/tmp/wd",
        "env": env,
        "argv": argv or ["python", "-m", "torch.distributed.run", "-m", "nsa.train"],
        "max_restarts": 1,
    }


BASE_LINES = wrapper_script(_req({})).count("\n")


@settings(max_examples=300, deadline=None)
@given(name=NAMES, value=NASTY)
def test_an_accepted_env_assignment_is_exactly_one_quoted_line(name, value):
    try:
        env = envspec.parse_assignments([f"{name}={value}"])
    except LaunchError:
        return
    [(k, v)] = env.items()  # `name` may itself hold a '=': the item splits at the first one
    script = wrapper_script(_req(env))
    assert script.count("\n") == BASE_LINES + 1
    [line] = [ln for ln in script.splitlines() if ln.startswith(f"export {k}=")]
    assert shlex.split(line) == ["export", f"{k}={v}"]


@settings(max_examples=300, deadline=None)
@given(name=NASTY)
def test_an_accepted_run_name_adds_no_line(name):
    try:
        registry.check_run_name(name)
    except LaunchError:
        return
    assert "\n" not in name and "\r" not in name
    assert wrapper_script(_req({}, run=name)).count("\n") == BASE_LINES


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(["train.steps", "data.text_field", "train.steps\n", "x"]), value=NASTY)
def test_an_accepted_set_override_stays_on_its_line(key, value):
    text = f"{key}={value}"
    try:
        parse_override(text)
    except ConfigError:
        return
    argv = ["python", "-m", "nsa.train", "--set", text]
    script = wrapper_script(_req({}, argv=argv))
    assert script.count("\n") == BASE_LINES
    assert any(shlex.split(ln)[: len(argv)] == argv for ln in script.splitlines() if ln.startswith("python"))


@pytest.mark.parametrize(
    "item", ["MYVAR\n=touch /tmp/x", "MYVAR=x\ntouch /tmp/x", "NCCL_DEBUG_SUBSYS=INIT\n", "MY_FLAG=a\x00b"]
)
def test_the_reported_injections_are_refused(item):
    with pytest.raises(LaunchError):
        envspec.parse_assignments([item])
