"""Every float option of the CLI refuses `nan` and `inf` (found by the second recovery QA walk,
2026-11-27): click's FloatRange lets nan through (nan <= 0 is False) and inf past a lower bound, so
`pods offers --max-price nan` compared False with every offer's price and `pods create --ready-timeout
nan` waited forever. Exit 2 naming the option and the value, before any API or host is asked (no
PRIME_API_KEY is set here: a call would fail otherwise). The CLI in-process."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from launcher.cli import cli


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PRIME_API_KEY", raising=False)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize(
    "args,option,what",
    [
        (["pods", "offers"], "--max-price", "price in $/h"),
        (["pods", "create"], "--max-price", "price in $/h"),
        (["pods", "create"], "--ready-timeout", "number of seconds"),
        (["up", "--provision", "prime", "--dry-run"], "--max-price", "price in $/h"),  # offer_options, shared
        (["up", "--provision", "prime", "--dry-run"], "--ready-timeout", "number of seconds"),
    ],
)
def test_a_price_or_seconds_that_is_not_finite_is_bad_input(args, option, what, value, tmp_path):
    res = CliRunner().invoke(cli, [*args, option, value])
    assert res.exit_code == 2, res.output
    if value == "-inf":  # below the range's bound, as click says of any number there
        assert f"Invalid value for '{option}': -inf is not in the range" in res.output, res.output
    else:
        assert f"Invalid value for '{option}': {value!r} is not a finite {what}." in res.output, res.output
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.json"))


@pytest.mark.parametrize("option", ["--pull-every", "--lost-after", "--refresh"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_the_dashboards_seconds_refuse_nan_and_inf(option, value):
    """The dashboard checks its own ranges (with a fix, tests/dashboard/test_cli.py), which nan and inf fail."""
    res = CliRunner().invoke(cli, ["dashboard", option, value])
    assert res.exit_code == 2, res.output
    low = "[0, " if option == "--lost-after" else "(0, "  # --lost-after 0 is taken, as watch takes it
    assert f"{option} {value}: must be a number of seconds in {low}" in res.output and "fix: " in res.output


def test_the_shared_type_keeps_finite_values_and_the_range():
    from launcher.cli.app import Price, Seconds
    from launcher.cli.watch import Seconds as WatchSeconds

    assert WatchSeconds is Seconds  # pull.py and watch.py use the one type
    assert Price(min=0, min_open=True).convert("0.25", None, None) == 0.25
    assert Seconds(min=0.0).convert("0", None, None) == 0.0
    with pytest.raises(Exception, match="not in the range"):
        Price(min=0, min_open=True).convert("0", None, None)
