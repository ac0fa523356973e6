"""The per-stage timeline of one push/pull iteration, from the ranks' traces.

Reads the files a benchmark's ``--trace DIR`` wrote (``autotune.runtime.data.trace``: one per
rank, every operation with the times it was issued, waited for and done; the hosts of the
emulated cluster share one clock) and takes one iteration: the operations issued after the
first worker's start of the chosen iteration's mark (its ``sync``) and done by the last
worker's end. For every chunk
it joins the worker's push and pull with the Summation Service's receives and sends, and
splits the chunk's time into stages:

* **push**: issued to done on the worker, split into *queued* (behind the earlier pushes
  of its flow: one TCP connection per stream and peer) and *on the wire*;
* **wait for parts**: from this worker's part in at the server to the last part in;
* **summation**: from the last part in to the sum's sends issued;
* **pull**: from the sends issued to the pull done on the worker.

It also gives the fill (start to the first pull done: no worker can receive before a
first sum exists) and the drain (last push done to the last pull done), each worker's
bytes per direction against the NIC rate, and the rate each flow reached while it had
bytes on the wire (against the per-flow cap). Times on the worker side are when the
stream's wait returned; a wait that did not block only bounds the completion (see
``autotune/runtime/data/trace.py``).

    python benchmarks/timeline.py DIR [--iteration "pp k=4 s4 c256K"] [--index -1] \\
        [--nic-mbs 47.9] [--cap-mbs 12.5] [--json out.json] [--plot out.png]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

_OP = re.compile(r"^stream (\d+) chunk (\d+): (push to|pull from|receive from|send sum to) "
                 r"rank (\d+)$")
_MARK = re.compile(r"^(iteration|sync) (.+) (\d+)$")


def load(folder: Path) -> dict[int, dict]:
    ranks = {}
    for p in sorted(folder.glob("rank*.json")):
        d = json.loads(p.read_text())
        ranks[int(d["rank"])] = d
    if not ranks:
        raise SystemExit(f"{folder}: no rank*.json (run a benchmark with --trace {folder})")
    return ranks


def iterations(ranks: dict[int, dict], kind: str = "iteration") -> dict[tuple[str, int], list[dict]]:
    """(label, index) -> every worker's mark of that iteration (``kind`` "sync": the
    marks of its ``sync`` alone, where the benchmark wrote them), each with its rank."""
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r, d in ranks.items():
        for e in d["events"]:
            m = _MARK.match(e["what"]) if not e["peers"] else None
            if m and m.group(1) == kind:
                out[(m.group(2), int(m.group(3)))].append({**e, "rank": r})
    return out


def window(ranks: dict[int, dict], label: str | None,
           index: int) -> tuple[str, int, list[dict]]:
    """The iteration to analyse: its label, index and every worker's mark of it."""
    its = iterations(ranks)
    labels = list(dict.fromkeys(k[0] for k in its))
    if not labels:
        raise SystemExit("no iteration marks in the traces")
    if label is None:
        label = next((x for x in labels if x.startswith("pp")), labels[0])
    if label not in labels:
        raise SystemExit(f"no iteration {label!r}; the traces hold {labels}")
    idx = sorted(i for (lab, i) in its if lab == label)
    i = idx[index]
    return label, i, its[(label, i)]


def _on_wire(ops: list[dict], start_key: str) -> None:
    """Set ``wire`` (when the op's bytes began to move) on ops of one flow: not before it
    was started, nor before the flow's previous op was done (one TCP connection)."""
    prev = float("-inf")
    for o in sorted(ops, key=lambda o: o[start_key]):
        o["wire"] = max(o[start_key], prev)
        prev = max(prev, o["done"])


def analyse(ranks: dict[int, dict], label: str | None = None, index: int = -1,
            nic_mbs: float | None = None, cap_mbs: float | None = None) -> dict:
    label, i, marks = window(ranks, label, index)
    t0, t1 = min(m["issued"] for m in marks), max(m["done"] for m in marks)
    pushes, pulls, recvs, sends = [], [], [], []
    for r, d in ranks.items():
        for e in d["events"]:
            m = _OP.match(e["what"])
            if not m:
                continue
            # another iteration's. The server posts its receives ahead (``sum_depth``
            # units): one for this iteration may be issued before the window opens, so a
            # receive counts by when it was done (a fresh clone's `make test` missed a
            # chunk's "wait for parts" so)
            start = e["done"] if m.group(3) == "receive from" else e["issued"]
            if start < t0 or e["done"] > t1 + 1e-3:
                continue
            o = {"rank": r, "stream": int(m.group(1)), "chunk": int(m.group(2)),
                 "peer": int(m.group(4)), "bytes": e["nbytes"], "issued": e["issued"],
                 "waited": e["waited"], "done": e["done"]}
            {"push to": pushes, "pull from": pulls, "receive from": recvs,
             "send sum to": sends}[m.group(3)].append(o)
    if not pushes:
        raise SystemExit(f"iteration {label!r} {i}: no push/pull operations (allreduce?)")
    # (chunk, worker) -> this iteration's part in: the first, as a receive the server posts
    # for the next iteration may end inside the window's tolerance
    part_in: dict[tuple[int, int], float] = {}
    for o in recvs:
        key = (o["chunk"], o["peer"])
        part_in[key] = min(part_in.get(key, o["done"]), o["done"])
    all_in: dict[int, float] = defaultdict(float)
    for (c, _), t in part_in.items():
        all_in[c] = max(all_in[c], t)
    # the sum sent: its first send after the last part came in. An earlier send in the
    # window is the previous iteration's, to a worker that began this one later than the
    # window's first (CI and a fresh clone's `make test` saw a negative summation stage)
    sum_out: dict[int, float] = {}
    for o in sends:
        if o["chunk"] in all_in and o["issued"] >= all_in[o["chunk"]]:
            sum_out[o["chunk"]] = min(sum_out.get(o["chunk"], o["issued"]), o["issued"])
    # pull on the wire: not before its sum was sent, nor before the flow's previous pull
    for o in pulls:
        o["sent"] = sum_out.get(o["chunk"], o["issued"])
    flows: dict[tuple, list[dict]] = defaultdict(list)
    for o in pushes:
        flows[("push", o["rank"], o["peer"], o["stream"])].append(o)
    for o in pulls:
        flows[("pull", o["peer"], o["rank"], o["stream"])].append(o)
    for key, ops in flows.items():
        _on_wire(ops, "issued" if key[0] == "push" else "sent")
    pull_of = {(o["rank"], o["chunk"]): o for o in pulls}
    stages: dict[str, list[float]] = defaultdict(list)
    for p in pushes:
        q = pull_of.get((p["rank"], p["chunk"]))
        stages["push queued"].append(p["wire"] - p["issued"])
        stages["push on the wire"].append(p["done"] - p["wire"])
        key = (p["chunk"], p["rank"])
        if key in part_in and p["chunk"] in sum_out:
            stages["wait for parts"].append(all_in[p["chunk"]] - part_in[key])
            stages["summation"].append(sum_out[p["chunk"]] - all_in[p["chunk"]])
        if q is not None:
            stages["pull queued"].append(q["wire"] - q["sent"])
            stages["pull on the wire"].append(q["done"] - q["wire"])
            stages["chunk, push issued to pull done"].append(q["done"] - p["issued"])
    span = t1 - t0
    began = {m["rank"]: m for m in marks}
    synced = {m["rank"]: m for m in iterations(ranks, "sync").get((label, i), [])}
    per_worker = {}
    for w in sorted({p["rank"] for p in pushes}):
        mine_p = [p for p in pushes if p["rank"] == w]
        mine_q = [q for q in pulls if q["rank"] == w]
        first = min(p["issued"] for p in mine_p)
        per_worker[w] = {
            "start_s": began[w]["issued"] - t0 if w in began else None,
            "sync_done_s": synced[w]["done"] - t0 if w in synced else None,
            "bytes_out": sum(p["bytes"] for p in mine_p),
            "bytes_in": sum(q["bytes"] for q in mine_q),
            "first_push_issued_s": first - t0,
            "first_pull_done_s": min(q["done"] for q in mine_q) - t0,
            "last_push_done_s": max(p["done"] for p in mine_p) - t0,
            "last_pull_done_s": max(q["done"] for q in mine_q) - t0,
            "out_MBps": sum(p["bytes"] for p in mine_p) / span / 1e6,
            "in_MBps": sum(q["bytes"] for q in mine_q) / span / 1e6,
            "out_busy": _covered([(p["wire"], p["done"]) for p in mine_p]) / span,
            "in_busy": _covered([(q["wire"], q["done"]) for q in mine_q]) / span,
        }
    flow_rates = []
    for key, ops in sorted(flows.items()):
        busy = _covered([(o["wire"], o["done"]) for o in ops])
        nbytes = sum(o["bytes"] for o in ops)
        flow_rates.append({"direction": key[0], "src": key[1], "dst": key[2],
                           "stream": key[3], "ops": len(ops), "bytes": nbytes,
                           "busy_s": busy, "MBps_on_wire": nbytes / busy / 1e6 if busy else 0.0,
                           "MBps_over_iteration": nbytes / span / 1e6})
    return {
        "iteration": label, "index": i, "span_s": span, "nic_MBps": nic_mbs,
        "cap_MBps": cap_mbs, "chunks": len({p["chunk"] for p in pushes}),
        "stages": {k: _summary(v) for k, v in stages.items()},
        "workers": per_worker, "flows": flow_rates,
        "events": {"push": pushes, "pull": pulls, "t0": t0},
    }


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10, method="inclusive") if len(xs) >= 2 else xs * 9
    return {"n": len(xs), "median_ms": 1e3 * statistics.median(xs), "p10_ms": 1e3 * q[0],
            "p90_ms": 1e3 * q[-1], "sum_s": sum(xs)}


def print_report(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=120)
    con.print(f"[bold]{res['iteration']}[/], iteration {res['index']}: {res['span_s']:.3f} s, "
              f"{res['chunks']} chunks")
    t = Table(title="stages of a chunk (every worker's chunks)")
    for col in ("stage", "chunks", "median", "p10", "p90"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for k, s in res["stages"].items():
        t.add_row(k, str(s["n"]), f"{s['median_ms']:.1f} ms", f"{s['p10_ms']:.1f} ms",
                  f"{s['p90_ms']:.1f} ms")
    con.print(t)
    nic = res["nic_MBps"]
    t = Table(title="each worker over the iteration" + (f" (NIC {nic:.1f} MB/s)" if nic else ""))
    for col in ("worker", "start", "sync done", "first push", "first pull done",
                "last push done", "last pull done", "out MB/s", "in MB/s", "out busy", "in busy"):
        t.add_column(col, justify="right")
    for w, x in res["workers"].items():
        times = ("start_s", "sync_done_s", "first_push_issued_s", "first_pull_done_s",
                 "last_push_done_s", "last_pull_done_s")
        t.add_row(str(w), *(f"{1e3 * x[k]:.0f} ms" if x[k] is not None else "-" for k in times),
            *(f"{x[k]:.1f}" + (f" ({x[k] / nic:.2f})" if nic else "") for k in ("out_MBps", "in_MBps")),
            f"{x['out_busy']:.2f}", f"{x['in_busy']:.2f}")
    con.print(t)
    rates = [f["MBps_on_wire"] for f in res["flows"]]
    cap = res["cap_MBps"]
    con.print(f"{len(rates)} flows; rate while on the wire: median {statistics.median(rates):.2f} "
              f"MB/s, min {min(rates):.2f}, max {max(rates):.2f}"
              + (f" (cap {cap:.2f} MB/s)" if cap else ""))


def plot(res: dict, path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchlib import pyplot, save_figure

    plt = pyplot()
    t0 = res["events"]["t0"]
    lanes = sorted({(o["rank"], o["stream"]) for o in res["events"]["push"]})
    fig, ax = plt.subplots(figsize=(11, 0.35 * len(lanes) + 1.5))
    for y, (w, s) in enumerate(lanes):
        for kind, color, dy in (("push", "#4c72b0", 0.2), ("pull", "#55a868", -0.2)):
            for o in res["events"][kind]:
                if (o["rank"], o["stream"]) == (w, s):
                    ax.barh(y + dy, o["done"] - o["wire"], left=o["wire"] - t0, height=0.35,
                            color=color, edgecolor="none")
    ax.set_yticks(range(len(lanes)), [f"worker {w} stream {s}" for w, s in lanes], fontsize=7)
    ax.set_xlabel("seconds from the iteration's start")
    ax.set_title(f"{res['iteration']}: pushes (blue) and pulls (green) on the wire")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--iteration", default=None, help="the mark's label, e.g. 'pp k=4 s4 c256K' "
                    "(default: the first push/pull configuration)")
    ap.add_argument("--index", type=int, default=-1, help="which of its iterations (default last)")
    ap.add_argument("--nic-mbs", type=float, default=None, help="the NIC rate B, MB/s")
    ap.add_argument("--cap-mbs", type=float, default=None, help="the per-flow cap, MB/s")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    a = ap.parse_args(argv)
    res = analyse(load(a.folder), a.iteration, a.index, a.nic_mbs, a.cap_mbs)
    print_report(res)
    if a.json:
        a.json.write_text(json.dumps({k: v for k, v in res.items() if k != "events"}, indent=1))
    if a.plot:
        plot(res, a.plot)


if __name__ == "__main__":
    main()
