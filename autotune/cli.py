"""The ``autotune`` command line.

Each subcommand lives beside the concept it drives; :data:`COMMANDS` says where, and the
group imports a command's module only when that command runs (or ``autotune --help``
lists it), so ``import autotune.cli`` imports none of them, and nothing here imports torch.
"""

from __future__ import annotations

import importlib

import click

from autotune import __version__

#: every subcommand as (module, name): the click command ``name`` is the module's
#: attribute ``name`` (sorted by name)
COMMANDS: tuple[tuple[str, str], ...] = (
    ("autotune.store.command", "db"),
    ("autotune.emulate.command", "emulate"),
    ("autotune.launch", "launch"),
    ("autotune.probes.command", "probe"),
    ("autotune.store.report", "report"),
    ("autotune.selftest.command", "selftest"),
    ("autotune.offline.command", "tune"),
)


class _Commands(click.Group):
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
    """Auto-tuned gradient communication for data-parallel PyTorch."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
