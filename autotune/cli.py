"""The ``autotune`` command line.

Each subcommand lives beside the concept it drives; :data:`COMMANDS` says where, and the
group imports a command's module only when that command runs (or ``autotune --help``
lists it), so ``import autotune.cli`` imports none of them, and nothing here imports torch.
"""

from __future__ import annotations

import difflib
import importlib

import click

from autotune import __version__

#: every subcommand as (module, name): the click command ``name`` is the module's
#: attribute ``name`` (sorted by name)
COMMANDS: tuple[tuple[str, str], ...] = (
    ("autotune.reports.db_command", "db"),
    ("autotune.emulate.command", "emulate"),
    ("autotune.launch", "launch"),
    ("autotune.probes.command", "probe"),
    ("autotune.reports.report", "report"),
    ("autotune.selftest.command", "selftest"),
    ("autotune.offline.command", "tune"),
)


class SuggestingGroup(click.Group):
    """A click group that answers a mistyped command with the nearest one: ``No such
    command 'lanuch'. Did you mean 'launch'?`` (:mod:`difflib`), else the list of its
    commands; a usage error (exit code 2) on one line."""

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            name = args[0] if args else ""
            if not name or name.startswith("-") or self.get_command(ctx, name) is not None:
                raise
            raise click.UsageError(self.no_such_command(ctx, name), ctx) from None

    def no_such_command(self, ctx: click.Context, name: str) -> str:
        """The error for an unknown command ``name``, with the nearest known one."""
        known = self.list_commands(ctx)
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        if near:
            return f"No such command {name!r}. Did you mean {near[0]!r}?"
        return f"No such command {name!r}. Commands: {', '.join(known)}."


class _Commands(SuggestingGroup):
    """A click group whose subcommands are :data:`COMMANDS`, imported when first used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({name for _, name in COMMANDS} | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            module = next((m for m, name in COMMANDS if name == cmd_name), None)
            if module is None:
                return None
            command = getattr(importlib.import_module(module), cmd_name)
            self.add_command(command, cmd_name)
        return self.commands[cmd_name]


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autotune")
def cli() -> None:
    """Auto-tuned gradient communication for data-parallel PyTorch.

    \b
    Examples:
      autotune launch --workers 4 --servers 2 train.py --epochs 3
      autotune tune --model resnet50 --workers 2 --budget 40
      autotune report latest
    """


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
