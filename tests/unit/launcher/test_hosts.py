"""--host targets: aliases, user@host[:port], and the Prime Intellect string."""

from __future__ import annotations

import pytest

from launcher.core.errors import LaunchError
from launcher.ssh.hosts import parse_target


def test_forms():
    a = parse_target("gpu-pod")
    assert (a.kind, a.host, a.user, a.port) == ("ssh", "gpu-pod", None, None)
    b = parse_target("ubuntu@1.2.3.4:2222")
    assert (b.host, b.user, b.port) == ("1.2.3.4", "ubuntu", 2222)
    c = parse_target("ubuntu@1.2.3.4 -p 22")
    assert (c.host, c.user, c.port, c.label) == ("1.2.3.4", "ubuntu", 22, "ubuntu@1.2.3.4:22")
    d = parse_target("ssh root@10.0.0.5 -p 40022")
    assert (d.host, d.user, d.port) == ("10.0.0.5", "root", 40022)
    assert parse_target("local").is_local
    assert parse_target(" user@[::1] ").host == "[::1]"


def test_roundtrip():
    s = parse_target("ubuntu@1.2.3.4 -p 22")
    assert type(s).from_dict(s.to_dict()) == s


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "a b",
        "u@h:0",
        "u@h:x",
        "u@h -p",
        "u@h -o X=1",
        "u@h:1 -p 2",
        "b@d user@h",
        "u@h$(x)",
        "u@h;ls",
        "'unclosed",
    ],
)
def test_rejects(bad):
    with pytest.raises(LaunchError) as e:
        parse_target(bad)
    assert e.value.exit_code == 2 and "user@host" in e.value.fix


def test_key_must_exist():
    with pytest.raises(LaunchError, match="key file"):
        parse_target("u@h -i /nonexistent/key")


def test_an_alias_missing_from_the_ssh_config_is_bad_input_before_any_run_is_announced(tmp_path):
    from click.testing import CliRunner

    from launcher.cli import cli
    from launcher.ssh.hosts import check_known_name

    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-pod\n  HostName 203.0.113.7\n  User ubuntu\nHost *\n  ServerAliveInterval 30\n")
    check_known_name(parse_target("gpu-pod", str(cfg)))  # in the config
    check_known_name(parse_target("ubuntu@203.0.113.9", str(cfg)))  # an address needs no entry
    check_known_name(parse_target("localhost", str(cfg)))  # DNS (hosts file) knows it
    with pytest.raises(LaunchError, match=r"'nosuchalias' is not a Host in the ssh config") as e:
        check_known_name(parse_target("nosuchalias", str(cfg)))
    assert e.value.exit_code == 2 and str(cfg) in e.value.message and "Host nosuchalias" in e.value.fix
    res = CliRunner().invoke(cli, ["up", "--host", "nosuchalias", "--ssh-config", str(cfg)])
    assert res.exit_code == 2, res.output
    assert "not a Host in the ssh config" in res.output
    assert "run " not in res.output.split("error:")[0]  # no run announced before the error
