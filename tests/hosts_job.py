"""A job that reports where its ranks run on the emulated cluster, for
tests/emulate/test_emulate.py: run as ``python hosts_job.py`` it brings up 2 hosts and
runs itself as a 2-rank job there twice, forked from it (``AUTOTUNE_LAUNCH_FORK=1``) and
as fresh interpreters behind ``ip netns exec`` (``=0``), then prints both jobs' reports
as one JSON line. Each rank reports its host name, network namespace, ``/sys/class/net``,
``/etc/hosts``, process group, stdin, torch's thread count, how it was started, and the
sum of an all-reduce over the hosts' link."""

from __future__ import annotations

import json
import os
import socket
import sys

MARK = "HOSTS: "

if os.environ.get("AUTOTUNE_ROLE"):  # a rank
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    with open("/proc/self/cmdline", "rb") as f:
        started_as = f.read().split(b"\0")[1:3]
    print(MARK + json.dumps({
        "hostname": socket.gethostname(), "netns": os.readlink("/proc/self/ns/net"),
        "sys_class_net": sorted(os.listdir("/sys/class/net")),
        "etc_hosts": open("/etc/hosts").read(), "group_leader": os.getpgid(0) == os.getpid(),
        "stdin": os.readlink("/proc/self/fd/0"), "threads": torch.get_num_threads(),
        "forked": b"hosts_job.py" not in started_as[0] and started_as[0] != b"-m",
        "sum": t.item()}), flush=True)
    dist.destroy_process_group()
else:
    from autotune.emulate import Cluster

    reports = {}
    with Cluster(hosts=2, rate="100mbit") as c:
        for fork in ("1", "0"):
            os.environ["AUTOTUNE_LAUNCH_FORK"] = fork
            job = c.launch([sys.executable, os.path.abspath(__file__)], workers=2,
                           timeout_s=120).check()
            reports[fork] = [job.last_json(MARK, rank=r) for r in range(2)]
    print(json.dumps(reports), flush=True)
