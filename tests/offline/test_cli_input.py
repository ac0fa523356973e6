"""Bad command-line input is a usage error (exit code 2, a clear message, no traceback)
before anything starts: ``autotune launch`` job shapes and ``python -m autotune.server``.
And the ``autotune`` group itself: every registered command loads, lazily (no torch)."""

from __future__ import annotations

# own world: the launch command's own checks and messages

import os
import resource
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from autotune.launch import check_world, launch, process_limit, run_job
from autotune.server import main as server_main
import zygote

DIST_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "AUTOTUNE_TIMEOUT",
            "AUTOTUNE_MACHINE")


@pytest.fixture
def marker_script(tmp_path):
    """A script that leaves a file behind if any rank of it ever runs."""
    marker = tmp_path / "ran"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    return script, marker


def _launch(*args: str):
    return CliRunner().invoke(launch, list(args), catch_exceptions=False)


# ------------------------------------------------------------------ launch
def test_zero_workers_is_a_usage_error_before_the_store_starts(marker_script):
    script, marker = marker_script
    r = _launch("--workers", "0", str(script))
    assert r.exit_code == 2, r.output
    assert "'--workers'" in r.output and "must be >= 1, got 0" in r.output
    assert "Traceback" not in r.output and "TCPStore" not in r.output
    r = _launch("--workers", "2", "--servers", "-1", str(script))
    assert r.exit_code == 2 and "'--servers'" in r.output and "must be >= 0" in r.output
    r = _launch("--workers", "2", "--machines", "0", str(script))
    assert r.exit_code == 2 and "'--machines'" in r.output and "must be >= 1" in r.output
    with pytest.raises(click.BadParameter, match="must be >= 1"):
        run_job([str(script)], workers=0)  # the Python API checks before the store too
    assert not marker.exists()


def test_more_processes_than_the_machine_allows_are_refused_before_any_starts(marker_script):
    script, marker = marker_script
    limit, why = process_limit()
    r = _launch("--workers", str(limit + 1), str(script))
    assert r.exit_code == 2, r.output
    assert f"limit of {limit}" in r.output and why in r.output and "torchrun" in r.output
    assert not marker.exists()
    # a huge server count is refused by the same check (never launched for real here)
    with pytest.raises(click.BadParameter, match=f"100001 processes, more than this machine's limit of {limit}"):
        check_world(1, 100000)
    check_world(1, limit - 1)  # right at the limit is fine


def test_the_process_limit_follows_cpus_and_ulimit():
    inf = resource.RLIM_INFINITY
    assert process_limit(cpus=2, nproc=inf)[0] == 64
    assert process_limit(cpus=16, nproc=inf) == (128, "max(64, 8 x 16 CPUs): every rank is a "
                                                      "Python process on this machine")
    limit, why = process_limit(cpus=16, nproc=100)
    assert limit == 50 and "ulimit -u" in why and "100" in why
    assert process_limit(cpus=16, nproc=100_000)[0] == 128
    # the real RLIMIT_NPROC of the process is what counts (soft limit lowered in a child)
    code = "from autotune.launch import process_limit; print(process_limit(cpus=4)[0])"
    soft = 40

    def lower() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))

    out = zygote.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, preexec_fn=lower)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(soft // 2)


# ------------------------------------------------------------------ python -m autotune.server
def _server(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in DIST_ENV}
    return zygote.run([sys.executable, "-m", "autotune.server", *args], capture_output=True,
                          text=True, timeout=60, env={**base, **env})


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_server_help_says_what_it_is_and_needs(flag):
    r = _server(flag)
    assert r.returncode == 0, r.stderr
    assert "Summation Service" in r.stdout and "usage: python -m autotune.server" in r.stdout
    for name in DIST_ENV:
        assert name in r.stdout
    assert "waits" in r.stdout and "sync(stop=True)" in r.stdout


def test_server_without_a_distributed_environment_is_a_usage_error():
    r = _server()
    assert r.returncode == 2
    assert "missing environment variables RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT" in r.stderr
    assert "usage:" in r.stderr and "--help" in r.stderr and "autotune launch" in r.stderr
    assert "Traceback" not in r.stderr
    r = _server(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    assert r.returncode == 2 and "missing environment variable MASTER_PORT:" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("env, message", [
    ({"RANK": "x"}, "RANK='x' is not an integer"),
    ({"RANK": "2"}, "RANK=2 must be in 0..WORLD_SIZE-1"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
    ({"AUTOTUNE_TIMEOUT": "-5"}, "AUTOTUNE_TIMEOUT='-5' must be a positive number"),
    ({"AUTOTUNE_TIMEOUT": "soon"}, "AUTOTUNE_TIMEOUT='soon' must be a positive number"),
])
def test_server_with_a_malformed_environment_is_a_usage_error(monkeypatch, capsys, env, message):
    good = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for k, v in {**good, **env}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as exit_:
        server_main([])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------ autotune tune flags and output
def _tune(*args: str):
    from autotune.offline.command import tune

    return CliRunner().invoke(tune, list(args), catch_exceptions=False)


def test_tune_m_means_machines_as_in_launch():
    r = _tune("-m", "resnet50", "--workers", "2")
    assert r.exit_code == 2, r.output
    assert "-m is --machines (as in autotune launch)" in r.output
    assert "--model resnet50" in r.output
    r = _tune("--model", "resnet50", "-n", "3", "-m", "2")  # -m parsed as the machines
    assert r.exit_code == 2 and "2 must divide --workers 3" in r.output


def _summary(mode: str) -> dict:
    return {"mode": mode, "model": "bert-large", "emulate_rate": None, "unit": "samples/s",
            "world": {"workers": 16, "servers": 4, "machines": 4},
            "best": {"streams": 4, "chunk_bytes": 64 << 20, "transport": "allreduce", "servers": 0,
                     "intra": "scatter", "reduce_root": 0, "compression": "none"},
            "best_score": 3759.2, "best_spread": 40.0, "best_iterations": 12,
            "default_score": 1200.0, "default_spread": 12.0, "default_iterations": 12,
            "kept_score": 3700.0, "kept_spread": 30.0, "kept_iterations": 8,
            "ddp_score": 135.4, "ddp_spread": 2.0, "ddp_iterations": 8,
            "simulated": mode == "simulated",
            "predicted": {"best": {"step_s": 0.12, "bottleneck": "nic"}},
            "trials": 100, "failed_trials": 0, "run_id": 3, "db": "a.db",
            "model_fp": "ab" * 20, "topology_fp": "cd" * 20}


def test_tune_summary_has_human_units_and_the_ddp_caveat(capsys, monkeypatch):
    from autotune.offline.command import _print_summary

    monkeypatch.setenv("COLUMNS", "160")
    _print_summary(_summary("simulated"))
    out = capsys.readouterr().out
    assert "64 MiB" in out and "67108864" not in out
    assert "3,759 simulated samples/s" in out and "135 simulated samples/s" in out
    assert "27.33x (simulated)" in out and "3.13x (simulated)" in out
    assert "caveat: the simulated DDP is a flat ring all-reduce" in out
    # only the parameters that matter: no servers under allreduce, no reduce_root under scatter
    assert "reduce_root" not in out and "│ servers " not in out
    assert "120 ms, bottleneck nic" in out
    _print_summary(_summary("local"))
    out = capsys.readouterr().out
    assert "3,700 ± 30 samples/s (8 iterations)" in out and "caveat" not in out
    assert "27.33x ± 0.46 (8 vs 8 iterations)" in out and "3.13x ± 0.05 (12 vs 12" in out


# ------------------------------------------------------------------ the autotune group
def test_every_registered_command_loads_under_its_name():
    from autotune.cli import COMMANDS, cli

    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(name for _, name in COMMANDS)
    for module, name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name, (module, name)
    assert cli.get_command(ctx, "no-such-command") is None
    r = CliRunner().invoke(cli, ["no-such-command"])
    assert r.exit_code == 2 and "No such command" in r.output


def test_the_cli_imports_no_command_and_its_help_no_torch():
    code = ("import sys, autotune.cli as c; loaded = set(sys.modules); "
            "c.cli(['--help'], standalone_mode=False); "
            "print(sorted(m for m in loaded if m.startswith('autotune')), 'torch' in sys.modules)")
    proc = zygote.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    *help_text, last = proc.stdout.strip().splitlines()
    assert last == "['autotune', 'autotune.cli'] False", proc.stdout
    for name in ("db", "emulate", "launch", "probe", "report", "selftest", "tune"):
        assert any(ln.strip().startswith(name + " ") for ln in help_text), proc.stdout


# ------------------------------------------------------------------ autotune emulate list
def test_emulate_list_says_when_there_is_no_cluster(monkeypatch):
    from autotune.emulate import netns
    from autotune.emulate.command import emulate

    monkeypatch.setattr(netns, "list_netns", lambda prefix=netns.PREFIX: [])
    r = CliRunner().invoke(emulate, ["list"], catch_exceptions=False)
    assert r.exit_code == 0 and "no emulated clusters" in r.output
    monkeypatch.setattr(netns, "list_netns", lambda prefix=netns.PREFIX: ["atc1-h0", "atc1-h1"])
    r = CliRunner().invoke(emulate, ["list"], catch_exceptions=False)
    assert r.output.split() == ["atc1"]
