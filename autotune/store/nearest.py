"""The stored runs most like a job: its model and cluster graphs against those of every
stored run, by graph edit distance (:mod:`autotune.store.similarity` ranks them). The
graphs' summaries and the distances found are kept for the life of the store, so a
second look-up does not load or compare them again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from autotune.store.connection import Connection
from autotune.store.fingerprint import from_json
from autotune.store.reader import RunReader
from autotune.store.rows import decode
from autotune.store.sqltext import json_field_equals
from autotune.store.similarity import BUDGET_S, TIMEOUT_S, Candidate, Matcher, Summary

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

SUMMARY_BATCH = 500  # fingerprints per query (SQLite's limit on parameters is 999 on old builds)


class NearestRuns:
    """Finds the stored runs nearest to a job or to a stored run; see
    :class:`autotune.store.db.Store`, which is how callers reach it."""

    def __init__(self, connection: Connection, reader: RunReader) -> None:
        self.connection = connection
        self.reader = reader
        self._summaries: dict[str, Summary] = {}
        self._distances: dict[tuple[str, str], float] = {}

    def summaries(self, fps: Iterable[str]) -> dict[str, Summary]:
        """The summaries of the stored graphs ``fps`` (and of every graph loaded
        before), by fingerprint; fingerprints not stored are absent."""
        missing = sorted({fp for fp in fps if fp not in self._summaries})
        for i in range(0, len(missing), SUMMARY_BATCH):
            part = missing[i : i + SUMMARY_BATCH]
            rows = self.connection.read(
                f"select fingerprint, graph from graphs where fingerprint in ({','.join('?' * len(part))})",
                part)
            for r in rows:
                self._summaries[r["fingerprint"]] = Summary.of(
                    from_json(r["graph"]), r["fingerprint"], normalized=True)
        return self._summaries

    def nearest(
        self,
        model_graph: "nx.Graph | None",
        topology_graph: "nx.Graph | None",
        k: int = 3,
        *,
        exclude: int | None = None,
        finished_only: bool = True,
        unit: str | Sequence[str] | None = None,
        space_facts: Mapping[str, Any] | None = None,
        across_machines: bool | None = None,
        max_distance: float | None = None,
        timeout: float = TIMEOUT_S,
        budget: float | None = BUDGET_S,
    ) -> list[tuple[dict, float]]:
        """The ``k`` stored runs most like a job with these graphs, nearest first, as
        ``(run, distance)``; 0 means same model and cluster (see
        :mod:`autotune.store.similarity`). By default only finished runs with a best
        configuration count; runs sharing both graphs are ordered by their best score's
        speed-up over their own default score (a ratio, the same in any unit), then by
        best score.

        Only runs whose ``unit`` is this one (or one of these), whose recorded ``space_facts`` hold these
        values, that ran on more than one machine (``across_machines``) or on one, and
        at most ``max_distance`` away count (each: when given)."""
        qm, qt = Summary.of(model_graph), Summary.of(topology_graph)
        where = " where 1 = 1"
        params: list[Any] = []
        if finished_only:
            where += " and status = 'finished' and best_config is not null"
        if exclude is not None:
            where += " and id != ?"
            params.append(int(exclude))
        if unit is not None:
            units = [unit] if isinstance(unit, str) else list(unit)
            where += f" and unit in ({', '.join('?' * len(units))})"
            params += [str(u) for u in units]
        for name, value in sorted((space_facts or {}).items()):
            clause, values = json_field_equals(self.connection.dialect, "space_facts", name,
                                               value)
            where += " and " + clause
            params += values
        if across_machines is not None:
            where += " and (machines > 1) = ?"
            params.append(bool(across_machines))
        groups = self.connection.tuples(
            "select model_fp, topology_fp, count(*) from runs" + where +
            " group by model_fp, topology_fp", params)
        summaries = self.summaries({fp for g in groups for fp in g[:2]})
        cands = [Candidate((m, t), summaries[m], summaries[t], n)
                 for m, t, n in groups if m in summaries and t in summaries]
        ranked = Matcher(self._distances).rank(qm, qt, cands, k, timeout=timeout, budget=budget)
        out: list[tuple[dict, float]] = []
        for cand, d in ranked:
            if len(out) >= k or (max_distance is not None and d > max_distance):
                break
            mfp, tfp = cand.key
            rows = self.connection.read(
                "select * from runs" + where + " and model_fp = ? and topology_fp = ?"
                " order by best_score / nullif(default_score, 0) is null,"
                " best_score / nullif(default_score, 0) desc,"
                " best_score is null, best_score desc, id desc limit ?",
                params + [mfp, tfp, k - len(out)])
            out += [(decode("runs", r), d) for r in rows]
        return out

    def similar(self, run_id: int | str, k: int = 3, **kw: Any) -> list[tuple[dict, float]]:
        """The runs nearest to a stored run (itself excluded); ``kw`` as :meth:`nearest`."""
        ref = self.reader.run(run_id)
        summaries = self.summaries([ref["model_fp"], ref["topology_fp"]])
        return self.nearest(summaries[ref["model_fp"]].graph, summaries[ref["topology_fp"]].graph,
                            k, exclude=ref["id"], **kw)
