"""What a rank sees of its own process, for tests/test_forked.py: run by ``autotune
launch`` with and without ``--fork``, each rank writes ``OUT.<rank>.json``.

``python forked_facts.py OUT [exit CODE | raise | message]``: rank 1 then ends that way
(``sys.exit(CODE)``, an uncaught exception, ``sys.exit("...")``); rank 0 ends normally.
Every rank also registers an ``atexit`` function and starts a non-daemon thread that
writes late, which the interpreter's exit must wait for.
"""

import atexit
import json
import os
import random
import signal
import sys
import threading
import time

import numpy as np

OUT = sys.argv[1]
RANK = os.environ["RANK"]


def _late() -> None:
    time.sleep(0.3)
    with open(f"{OUT}.{RANK}.thread", "w") as f:
        f.write("joined")


def _at_exit() -> None:
    with open(f"{OUT}.{RANK}.atexit", "w") as f:
        f.write("ran")


atexit.register(_at_exit)
threading.Thread(target=_late).start()
facts = {
    "argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0],
    "rank": RANK, "world_size": os.environ.get("WORLD_SIZE"),
    "signals": {s.name: str(signal.getsignal(s)) for s in
                (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGHUP, signal.SIGUSR1)},
    "excepthook": sys.excepthook is sys.__excepthook__,
    "autotune_loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("autotune", "click")),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "threads": threading.active_count(),
    "random": random.random(), "numpy": float(np.random.rand()),
}
with open(f"{OUT}.{RANK}.json", "w") as f:
    json.dump(facts, f)
print(f"rank {RANK} wrote its facts", end="")  # no newline: the launcher must still see it
if RANK == "1" and len(sys.argv) > 2:
    if sys.argv[2] == "exit":
        sys.exit(int(sys.argv[3]))
    if sys.argv[2] == "raise":
        raise ValueError("raised on purpose in forked_facts")
    sys.exit("said on purpose in forked_facts")
