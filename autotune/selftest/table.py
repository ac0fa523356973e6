"""The leader's table of an ``autotune selftest`` run (rich), native or ``--ddp``: every
configuration, its check, differences, time and ratio to DDP, from the result that
``--json`` writes."""

from __future__ import annotations

import sys
from typing import Any, Mapping

from autotune.selftest.sweep import MiB


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def print_table(result: Mapping[str, Any], out: Any = None) -> None:
    """The leader's table: every configuration, its check, differences, time and ratio.
    ``--ddp`` (``result["mode"] == "ddp"``): the time of DDP with autotune's hook, and of
    plain DDP on the same iterations beside it."""
    from rich.console import Console
    from rich.table import Table

    con = Console(file=out or sys.stdout, highlight=False,
                  width=None if (out or sys.stdout).isatty() else 132)
    ddp = result.get("mode") == "ddp"
    w = result["world"]
    who = (f" --ddp: {len(w['workers'])} ranks, DDP over {result['ddp_backend']}" if ddp else
           f": {len(w['workers'])} workers, {len(w['servers'])} servers")
    title = (f"autotune selftest{who}, {result['device']}, "
             f"{result['gradient_bytes'] / MiB:.3g} MiB in {result['tensors']} tensors, "
             f"median of {result['iterations']}")
    t = Table(title=title)
    columns = [("#", "right"), ("configuration", "left"), ("check", "left"),
               ("max |diff|", "right"), ("rel", "right"), ("/bound", "right"),
               ("ms", "right")] + ([("DDP ms", "right")] if ddp else []) + [("vs DDP", "right")]
    for name, just in columns:
        t.add_column(name, justify=just)  # type: ignore[arg-type]
    plain = [""] if ddp else []
    refs = result["reference"]
    if "ddp" in refs:
        d = refs["ddp"]
        t.add_row("", d.get("label", "DDP"),
                  "exact" if d["exact"] else f"close ({d['bound_ratio']:.2g})",
                  f"{d['max_abs']:.2g}", "", "", _ms(d["median_ms"]), *plain, "x1.00")
        a = refs["all_reduce"]
        t.add_row("", "all_reduce, flat (comm only)", "", "", "", "",
                  _ms(a["median_ms"]), *plain, f"x{d['median_ms'] / a['median_ms']:.2f}")
        t.add_section()
    for r in result["configs"]:
        status = r["status"]
        style = {"FAILED": "bold red", "SKIPPED": "yellow"}.get(status, "green")
        t.add_row(str(r["index"] + 1), r["label"], f"[{style}]{status}[/]",
                  "" if r.get("max_abs") is None else f"{r['max_abs']:.2g}",
                  "" if r.get("max_rel") is None else f"{r['max_rel']:.2g}",
                  "" if r.get("bound_ratio") is None else f"{r['bound_ratio']:.2g}",
                  _ms(r.get("median_ms")), *([_ms(r.get("ddp_ms"))] if ddp else []),
                  "" if r.get("vs_ddp") is None else f"x{r['vs_ddp']:.2f}")
    con.print(t)
    if ddp:
        timing = ("ms: median of the slowest rank's forward + backward of DDP with "
                  "autotune's comm hook under the configuration. DDP ms: plain DDP (its "
                  "default hook) on a copy of the model with the same gradients, as many "
                  "iterations, timed alternately with those. vs DDP: DDP ms / ms (above 1: "
                  "the hook is faster).")
    else:
        timing = ("ms: median of the slowest worker's sync + forward + backward + wait. vs "
                  "DDP: DDP's ms / this ms (above 1: faster).")
    con.print("check: exact = bit for bit torch.equal to all_reduce SUM / n; close = within "
              "the bound of summing in another order; lossy: within the codec's bound on "
              "the first iteration. /bound: worst difference over its bound. rel: max |diff| "
              f"/ max |reference|. {timing}")
    if result.get("device_note"):
        con.print(f"note: {result['device_note']}")
    bad = [r for r in result["configs"] if r["status"] in ("FAILED", "SKIPPED")]
    for r in bad:
        con.print(f"[bold red]{r['status']}[/] #{r['index'] + 1} {r['label']}: {r['error']}")
    verdict = ("[green]all configurations passed[/]" if result["passed"] else
               f"[bold red]{len(result['failed'])} configuration(s) failed[/]"
               + (f", {len(result['failed_lossless'])} lossless" if result["failed_lossless"]
                  else ""))
    con.print(f"autotune selftest: {verdict} ({result['seconds']:.1f} s)")
