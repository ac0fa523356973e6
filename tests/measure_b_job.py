"""``benchlib.measure_B`` on a 2-host emulated cluster, for
tests/emulate/test_emulate_bench.py: ``python measure_b_job.py RATE FLOW_CAP`` brings the
cluster up, measures the link as the benchmarks do and prints it as one JSON line (with
``benchlib.describe_link``'s sentence). Run as a process of its own (through the tests'
zygote), so that the probe jobs' ranks are forked into the hosts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import benchlib  # noqa: E402
from autotune.emulate import Cluster  # noqa: E402

with Cluster(hosts=2, rate=sys.argv[1], flow_cap=sys.argv[2]) as cluster:
    link = benchlib.measure_B(cluster, repeats=3, nbytes=4 << 20)
print(json.dumps({"link": link, "described": benchlib.describe_link(link)}), flush=True)
