"""Issue 38's friction list for the command line, with real invocations: every command's
``--help`` has examples; options with a fixed set of values list it (``tune
--techniques``); a mistyped command gets "did you mean"; ``autotune launch`` says when
one of its own options comes after the script (and so goes to the script)."""

from __future__ import annotations

# own world: the launch command's own hints and messages

import json
import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.tuning.search import TECHNIQUES
import zygote


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command under ``group`` as its words (``("db", "show")``), groups too."""
    ctx = click.Context(group)
    found = [path] if path else []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found += _commands(command, path + (name,))
        else:
            found.append(path + (name,))
    return found


COMMANDS = _commands()


def test_every_command_is_found():
    assert {("launch",), ("tune",), ("db", "show"), ("report",), ("probe",),
            ("selftest",), ("emulate", "run")} <= set(COMMANDS)


@pytest.mark.parametrize("words", [()] + COMMANDS, ids=lambda w: " ".join(w) or "autotune")
def test_every_help_has_one_to_three_examples(words):
    res = CliRunner().invoke(cli, [*words, "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    text = res.output
    assert re.search(r"^  Examples?:$", text, re.M), text
    examples = re.findall(r"^    (?:sudo )?autotune (.*)$", text, re.M)
    assert 1 <= len(examples) <= 3, text
    # each example runs this command (its words first), with options that exist
    for example in examples:
        assert example.split()[:len(words)] == list(words), example


def test_tune_lists_every_technique_and_accepts_them(tmp_path):
    res = CliRunner().invoke(cli, ["tune", "--help"], terminal_width=200)
    line = " ".join(res.output.split())
    choices = [*TECHNIQUES, "prior"]
    assert f"from: {', '.join(choices)}" in line, line
    for name in ("grid", "pbt", "bayes", "hyperband", "random", "tpe", "optuna-gp", "prior"):
        assert name in choices
    bad = CliRunner().invoke(cli, ["tune", "--model", "resnet50", "--workers", "2",
                                   "--techniques", "grid,magic"])
    assert bad.exit_code == 2 and ", ".join(choices) in " ".join(bad.output.split())
    # a technique beyond the paper's four runs (simulated: seconds)
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"machines": 2, "gpus_per_machine": 2, "nic_gbps": 10}))
    ok = CliRunner().invoke(cli, ["tune", "--model", "resnet50", "--simulate", str(cluster),
                                  "--budget", "6", "--techniques", "random,prior", "--json",
                                  "--db", str(tmp_path / "t.db")])
    assert ok.exit_code == 0, ok.output
    assert {"random", "prior"} & {h["technique"] for h in _trials(tmp_path / "t.db")}


def _trials(db) -> list[dict]:
    from autotune.store import Store

    with Store(db) as store:
        return store.trials("latest")


@pytest.mark.parametrize("args, wanted", [
    (["lanuch"], "No such command 'lanuch'. Did you mean 'launch'?"),
    (["reprot", "latest"], "No such command 'reprot'. Did you mean 'report'?"),
    (["db", "sho", "latest"], "No such command 'sho'. Did you mean 'show'?"),
    (["emulate", "mesure"], "No such command 'mesure'. Did you mean 'measure'?"),
    (["xyzzy"], "No such command 'xyzzy'. Commands: db, emulate, launch, probe, report, "
                "selftest, tune."),
])
def test_a_mistyped_command_gets_did_you_mean(args, wanted):
    # a fresh process, as a person meets it: no command module loaded yet
    proc = zygote.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == f"Error: {wanted}", proc.stderr


def test_launch_hints_at_its_own_options_after_the_script(tmp_path):
    script = tmp_path / "show_args.py"
    script.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    args = ["--servers", "1", "--epochs", "3", "--grace=5", "-n", "2", "--", "--workers", "4"]
    proc = zygote.run([sys.executable, "-m", "autotune.cli", "launch", "--workers", "1",
                           str(script), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # still passed to the script, every one
    got = json.loads(proc.stdout.strip().removeprefix("[w0] ").splitlines()[0])
    assert got == args
    hints = [ln for ln in proc.stderr.splitlines() if ln.startswith("autotune launch: ")]
    assert hints == [f"autotune launch: {opt} comes after the script, so {script} gets it; "
                     f"to give it to autotune launch, put it before {script}"
                     for opt in ("--servers", "--grace", "-n")], proc.stderr
    # nothing to say where only the script's own options follow it
    quiet = zygote.run([sys.executable, "-m", "autotune.cli", "launch", "--workers", "1",
                            str(script), "--epochs", "3"], capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and "autotune launch:" not in quiet.stderr, quiet.stderr
