"""``python -m autotune.selftest``: the ``autotune selftest`` command (how ``torchrun`` and
the command itself start its ranks)."""

from autotune.selftest.command import main

main()
