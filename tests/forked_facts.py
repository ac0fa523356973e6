"""What a rank sees of its own process, for tests/test_forked.py: each rank writes
``OUT.<rank>.json``, then ends as its rank says.

``python forked_facts.py OUT``: rank 0 ends normally, rank 1 by ``sys.exit(3)``, rank 2
by an uncaught exception, rank 3 by ``sys.exit("...")``. Every rank also registers an
``atexit`` function and a ``weakref`` finalizer for the exit, and starts a non-daemon
thread that writes late, which the interpreter's exit must wait for.
"""

import atexit
import json
import os
import random
import signal
import sys
import threading
import time
import weakref

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
# a finalizer left for the interpreter's exit, as a temporary folder's clean-up is
weakref.finalize(_at_exit, lambda: open(f"{OUT}.{RANK}.finalizer", "w").close())
threading.Thread(target=_late).start()
facts = {
    "argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0],
    "rank": RANK, "world_size": os.environ.get("WORLD_SIZE"),
    "signals": {s.name: str(signal.getsignal(s)) for s in
                (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGHUP, signal.SIGUSR1)},
    "excepthook": sys.excepthook is sys.__excepthook__,
    "launcher_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("autotune", "click")),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "threads": threading.active_count(),
    "random": random.random(), "numpy": float(np.random.rand()), "path": sys.path,
}
if RANK == "0":  # the threads torch computes with, which OMP_NUM_THREADS sets
    import torch

    facts["torch_threads"] = torch.get_num_threads()
with open(f"{OUT}.{RANK}.json", "w") as f:
    json.dump(facts, f)
print(f"rank {RANK} wrote its facts", end="")  # no newline: the launcher must still see it
if RANK == "1":
    sys.exit(3)
if RANK == "2":
    raise ValueError("raised on purpose in forked_facts")
if RANK == "3":
    sys.exit("said on purpose in forked_facts")
