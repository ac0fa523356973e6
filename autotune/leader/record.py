"""A session's run in the results store: opened at the start, every trial, closed at the end.

The leader opens a run (the job's name, world, backend, model and cluster graphs, the
space's facts, the unit), reads what similar earlier jobs found (warm start, found by
graph edit distance) and, after a ``torchrun --max-restarts`` restart, the stored best of
the same job. Every configuration taken from the store keeps its origin (which run, its
job, when, how: :mod:`autotune.store.origin`), said when the session starts
(:meth:`SessionRun.provenance`) and stored with the run when it is the one kept. A store
that cannot be read or written warns; it never stops training. A database server that
cannot be reached when the job starts (:class:`autotune.store.StoreUnreachable`) warns
once: the job does not tune from the store (no warm start, no stored model or best) and
records its run in ``./autotune.db`` instead; one lost mid-run, the same from then on, as
a run that continues the shared one (:meth:`SessionRun.elsewhere`; ``autotune db import``
brings it back). A store that cannot be used at all (not autotune's, an SQLite file on a
network file system) warns and the run is not recorded.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

from autotune.runtime.config import ConfigError
from autotune.schedule.schedule import StoredStart
from autotune.tuning.space import Config, SearchSpace


def job_name(job: str | None, model: Any = None) -> str:
    """The job's name in the store: ``job``, else the script and the model's class,
    ``train.py:GPT`` (the script: ``AUTOTUNE_JOB``'s file name, which ``autotune launch``
    sets, else the program's), so that two scripts, or two models of one script, are two
    jobs."""
    if job:
        return job
    script = Path(os.environ.get("AUTOTUNE_JOB") or sys.argv[0] or "session").name or "session"
    return script if model is None else f"{script}:{type(model).__name__}"


class SessionRun:
    """The leader's run in the store at ``db`` (``None``: ``$AUTOTUNE_DB``, else
    ``./autotune.db``)."""

    def __init__(self, db: str | os.PathLike | None, job: str | None, model: Any = None):
        self.db = db
        self.job = job_name(job, model)
        self.store: Any = None
        self.reads_store = True  # False: the store was unreachable, the run is kept locally
        self.run_id: int | None = None
        self._model_graph: Any = None
        self._cluster_graph: Any = None
        self._alike: dict[str, Any] = {}  # what a stored run must share to warm-start it
        self._cluster: dict[str, Any] = {}  # what a stored calibration must share (its key)
        self._started: dict[str, Any] = {}  # what the run was started with
        # stored configurations this run may use, with their origins (autotune.store.origin)
        self.origins: list[tuple[Config, dict[str, Any]]] = []

    def open(self, model: Any, info: Any, backend: str, space: SearchSpace, unit: str) -> None:
        """Start the run (status ``running``)."""
        try:
            from autotune.probes.graph import job_graph
            from autotune.store import Store
            from autotune.store.fingerprint import model_graph
        except ImportError:
            return
        self.store = self._open_store(Store)
        if self.store is None:
            return
        self._model_graph = model_graph(model)
        # worker machines and servers joined through one switch node: O(n) edges, so
        # large jobs stay cheap to compare
        self._cluster_graph = job_graph(info.n_machines, info.workers_per_machine,
                                        len(info.servers))
        self._started = dict(
            job=self.job,
            world={"workers": len(info.workers), "servers": len(info.servers),
                   "machines": info.n_machines, "workers_per_machine": info.workers_per_machine},
            backend=backend, model_graph=self._model_graph, topology_graph=self._cluster_graph,
            space_facts=dict(space.facts), unit=unit)
        try:
            self.run_id = self.store.start_run(**self._started)
        except Exception as exc:  # the store must never stop training
            warnings.warn(f"could not record this run in {self.store.name}: {exc}; training "
                          "goes on unrecorded", stacklevel=2)
            self.store.close()
            self.store = None
            return
        self._alike = {"unit": unit, "machines": info.n_machines}
        self._cluster = {"world": {"machines": info.n_machines, "servers": len(info.servers),
                                   "workers_per_machine": info.workers_per_machine},
                         "device": _device_name(model), "backend": backend}

    def _open_store(self, store_class: Any) -> Any:
        """The store at ``db``; where its server cannot be reached, a local one; where it
        cannot be used at all (not autotune's, refused, broken), None. Each warned."""
        from autotune.store import StoreError, StoreUnreachable
        from autotune.store.location import DEFAULT_PATH, shown

        try:
            return store_class(self.db)
        except StoreUnreachable as exc:
            self.reads_store = False
            warnings.warn(
                f"{exc}; training goes on without it: no warm start or stored model from it, "
                f"and this run is recorded in ./{DEFAULT_PATH} instead. Nothing more will "
                f"be tried on {shown(self.db)}.", stacklevel=2)
            try:
                return store_class(DEFAULT_PATH)
            except Exception as local:
                warnings.warn(f"the local store ./{DEFAULT_PATH} failed too: {local}; this "
                              "run is not recorded", stacklevel=2)
                return None
        except (StoreError, ValueError) as exc:  # the store must never stop training
            warnings.warn(f"{exc}; training goes on untuned from the store and this run is "
                          "not recorded", stacklevel=2)
            return None

    def elsewhere(self, lost: BaseException) -> tuple[Any, int] | None:
        """The store's server was lost mid-run (``lost``, a ``StoreUnreachable``): the run
        goes on in ``./autotune.db`` as a new run that continues this one (its store and
        id; ``autotune db import`` brings it back and closes this one there as
        ``abandoned``). The local store and the new run's id; None where the run was
        local already or the local store fails too."""
        from autotune.store import Store
        from autotune.store.location import DEFAULT_PATH

        if self.store is None or self.run_id is None or not self.reads_store:
            return None
        continues = {"store": self.store.name, "run": self.run_id}
        try:
            local = Store(DEFAULT_PATH)
            run_id = local.start_run(**self._started, continues=continues)
        except Exception as exc:  # noqa: BLE001 - the store must never stop training
            warnings.warn(f"the local store ./{DEFAULT_PATH} failed too: {exc}", stacklevel=2)
            return None
        self.store, self.run_id, self.reads_store = local, run_id, False
        return local, run_id

    def stored_calibration(self) -> Any:
        """The tuner's model stored for alike machines (:mod:`autotune.store.calibrations`),
        or None."""
        if self.store is None or not self.reads_store:
            return None
        from autotune.sim.calibration import Calibration
        from autotune.store.calibrations import cluster_key

        try:
            row = self.store.calibrations.find(cluster_key(**self._cluster))
            return Calibration.from_json(row["calibration"]) if row else None
        except Exception as exc:
            warnings.warn(f"reading the stored calibration from {self.store.name} "
                          f"failed: {exc}")
            return None

    def search_costs(self, libraries: list[str]) -> Any:
        """What a search cost the newest run on this machine that measured it
        (:class:`autotune.schedule.stakes.SearchCosts`; the import of ``libraries`` counted
        only where this process has not imported them yet), or None."""
        if self.store is None or not self.reads_store:
            return None
        from autotune.schedule.stakes import SearchCosts
        from autotune.store.rows import host

        loaded = all(name in sys.modules for name in libraries)
        try:
            costs = self.store.tuning_costs(host())
        except Exception as exc:
            warnings.warn(f"reading earlier runs' tuning costs from {self.store.name} "
                          f"failed: {exc}")
            return None
        for cost in costs:
            found = SearchCosts.from_cost(cost, libraries_loaded=loaded)
            if found is not None:
                return found
        return None

    def save_calibration(self, model: Any) -> None:
        """Store the constants ``model`` (a :class:`autotune.sim.predict.ModelPrior`)
        ends with as the model of these machines; not the job's own compute time."""
        if self.store is None:
            return
        from autotune.sim.calibration import Calibration
        from autotune.store.calibrations import cluster_key

        c = model.calibration
        kept = Calibration({k: v for k, v in c.constants.items() if k != "compute_s"},
                           c.codecs, {k: v for k, v in c.sources.items() if k != "compute_s"})
        try:
            self.store.calibrations.save(cluster_key(**self._cluster), **self._cluster,
                                         calibration=kept.to_json(), run=self.run_id,
                                         fit_error=model.fit_error)
        except Exception as exc:
            warnings.warn(f"storing the calibration in {self.store.name} failed: {exc}")

    def warm_start(self, space: SearchSpace) -> list[Config]:
        """The best configurations of alike stored jobs (:mod:`autotune.store.warmstart`),
        then the space's seeds; the stored ones' origins go to :attr:`origins`."""
        sources: list[tuple[Config, dict[str, Any]]] = []
        if self.store is not None and self.reads_store:
            try:
                from autotune.store.warmstart import warm_start_sources

                sources = warm_start_sources(self.store, self._model_graph, self._cluster_graph,
                                             space, job=self.job, **self._alike)
            except Exception as exc:
                warnings.warn(f"warm start from {self.store.name} failed: {exc}")
        self.origins += sources
        warm = [c for c, _ in sources]
        return warm + [c for c in space.seeds() if c not in warm]

    def restarted_best(self, space: SearchSpace) -> Config | None:
        """Under ``torchrun --max-restarts``, after a restart (``TORCHELASTIC_RESTART_COUNT``
        > 0): the best configuration stored by an earlier run of the same job, if it still
        fits ``space``."""
        try:
            restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        except ValueError:
            restarts = 0
        if restarts <= 0 or self.store is None or not self.reads_store:
            return None
        try:
            runs = self.store.runs(job=self.job)
        except Exception as exc:
            warnings.warn(f"could not read earlier runs from the results store: {exc}")
            return None
        from autotune.store.origin import RESTART, origin_of

        for run in runs:
            if run["id"] != self.run_id and run.get("best_config"):
                try:
                    kept = space.validate(run["best_config"])
                except ConfigError:
                    continue
                self.origins.insert(0, (kept, origin_of(run, RESTART)))
                return kept
        return None

    def provenance(self, warm: list[Config], restarted: Config | None,
                   budget: int) -> tuple[list[tuple[Config, dict[str, Any]]], str | None]:
        """What the session starts from that came from the store: each configuration with
        its origin (a ``budget`` 0 session keeps ``warm[0]`` untuned: its origin says so),
        and the line that says it (``None``: nothing came from the store)."""
        from autotune.store.origin import BUDGET_ZERO, fmt_origin, warm_start_line

        def origin(config: Config) -> dict[str, Any] | None:
            return next((o for c, o in self.origins if c == config), None)

        if restarted is not None:
            o = origin(restarted)
            return [(restarted, o)], (f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')}: "
                                      f"keeping the stored best configuration of job "
                                      f"{self.job!r}, from {fmt_origin(o, how=False)}")
        stored = [(c, o) for c, o in self.origins if c in warm]
        if not stored:
            return [], None
        if budget == 0:
            c, o = warm[0], origin(warm[0])
            if o is None:  # the default or a seed: nothing from the store is used
                return [], None
            return [(c, {**o, "how": BUDGET_ZERO})], (
                f"budget 0: keeping the best configuration of {fmt_origin(o, how=False)} "
                "untuned")
        return stored, warm_start_line([o for _, o in stored])

    def stored_start(self, warm: list[Config], budget: int) -> StoredStart:
        """What the store offers a search (:class:`~autotune.schedule.schedule.StoredStart`):
        the warm start with its line, and the nearest stored best that beat its own run's
        default by more than the noise (``beat_default``,
        :func:`autotune.store.warmstart.warm_start_sources`), kept where the job affords
        no search once it beats the default here too."""
        from autotune.store.origin import NO_SEARCH, fmt_origin

        stored, line = self.provenance(warm, None, budget)
        proven = next(((c, o) for c, o in stored if o.get("beat_default")), None)
        if proven is None:
            return StoredStart(stored, line)
        c, o = proven
        speedup = f"{o['speedup']:.2f}x its default there" if o.get("speedup") else \
            "faster than its default there"
        return StoredStart(stored, line, (c, {**o, "how": NO_SEARCH},
                           f"trying the stored best of {fmt_origin(o, how=False)}, "
                           f"{speedup}, against the default"))


def _device_name(model: Any) -> str:
    """``"cpu"``, or the name of the GPU the model's parameters are on."""
    p = next(iter(model.parameters()), None)
    if p is None or not p.is_cuda:
        return "cpu"
    import torch

    return torch.cuda.get_device_name(p.device)
