"""``python -m autotune.emulate``: see :mod:`autotune.emulate.command`."""

from autotune.emulate.command import emulate

if __name__ == "__main__":
    emulate(prog_name="python -m autotune.emulate")
