"""The ``autotune`` command line.

Each subcommand lives beside the concept it drives and is registered here; this module
only builds the click group. ``autotune --help`` lists them.
"""

from __future__ import annotations

import click

from autotune import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autotune")
def cli() -> None:
    """Auto-tuned gradient communication for data-parallel PyTorch."""


# Subcommands register below, one line each (keep this list sorted):
# @@COMMANDS@@
from autotune.offline.command import tune; cli.add_command(tune)  # noqa: E402,E702
from autotune.probes.command import probe; cli.add_command(probe)  # noqa: E402,E702
from autotune.launch import launch; cli.add_command(launch)  # noqa: E402,E702
from autotune.emulate.command import emulate; cli.add_command(emulate)  # noqa: E402,E702
from autotune.store.command import db; cli.add_command(db)  # noqa: E402,E702
from autotune.store.report import report; cli.add_command(report)  # noqa: E402,E702
from autotune.selftest.command import selftest; cli.add_command(selftest)  # noqa: E402,E702


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
