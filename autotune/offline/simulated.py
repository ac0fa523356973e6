"""``autotune tune --simulate cluster.json``: the Tuner against the cluster simulator.

The same :class:`~autotune.tuning.tuner.Tuner` a training session uses asks for configurations;
:class:`~autotune.sim.SimulatedObjective` answers with the predicted (noisy) throughput
of the model's gradients on the described cluster, for clusters of any size. The run is
recorded like a session's (warm start from the nearest stored runs first, each said and,
when kept, stored with the run it came from; the default
configuration measured as long as the kept one, every trial stored, through the same
:class:`~autotune.schedule.ledger.Ledger`) but marked ``simulated``, under
the model's fingerprint (the real zoo module built on the meta device: no memory) and the
topology graph a session records (:func:`autotune.probes.graph.job_graph`, the builder
``Session._cluster_graph`` calls) for the simulated world. Its scores are simulated
samples/s, so it warm-starts later simulated runs of alike jobs, never a measured run
(:mod:`autotune.store.warmstart`).

The Tuner's physics prior is the simulator itself on the noise-free cluster (what a
session approximates from the facts it knows). Scores are samples/s over all workers
(``Job.batch_per_worker`` samples per worker per iteration); a trial's ``wall_time`` is its
predicted duration (iterations x step time). The DDP-like configuration (:data:`DDP_LIKE`)
is drawn as many iterations as the kept one, with the same noise, for the speed-up over
DDP (``ddp_like_score``); the noise-free predictions are in ``predicted``. Progress goes to a
:class:`~autotune.progress.TuningDisplay`, as a session's does.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from autotune.progress import TuningDisplay, describe_trial, kept_summary
from autotune.runtime.config import RuntimeConfig
from autotune.signals import check, deferred, shielded, status_of
from autotune.speedup import measure
from autotune.tuning.tuner import DEFAULT_TECHNIQUES

#: the scores' unit as shown (stored as samples/s in a run marked simulated)
SHOWN_UNIT = "simulated samples/s"

#: DDP's default: 25 MiB buckets, one all-reduce at a time, every worker in one ring.
DDP_LIKE = RuntimeConfig(chunk_bytes=25 << 20).as_dict()


def cluster_graph(machines: int, workers_per_machine: int, servers: int):
    """The topology graph a session on such a world records (the same builder,
    :func:`autotune.probes.graph.job_graph`)."""
    from autotune.probes.graph import job_graph

    return job_graph(machines, workers_per_machine, servers)


def tune_simulated(model: str, cluster_src: Any, *, budget: int = 100,
                   db: str | os.PathLike | None = None, compute_ms: float = 0.0,
                   backward_fraction: float = 2 / 3, batch_per_worker: int = 32,
                   seed: int = 0, techniques: Sequence[str] = DEFAULT_TECHNIQUES,
                   trial_iterations: int | None = None, noise: float = 0.03,
                   allow_lossy: bool = False, job: str | None = None,
                   fixed: Mapping[str, Any] | None = None,
                   display: TuningDisplay | None = None) -> dict[str, Any]:
    """Tune ``model`` on the simulated cluster ``cluster_src`` (a :class:`~autotune.sim.ClusterSpec`,
    or a JSON path, text or dict); record the run (``simulated=True``) in ``db``; return a
    report (see ``docs/tune.md``). ``fixed``: knobs pinned or narrowed (see
    :meth:`~autotune.tuning.space.SearchSpace.build`). ``display`` (for ``budget`` iterations, e.g.
    :func:`autotune.progress.tuning_display`) shows the trials as they run, and is
    stopped at the end."""
    from autotune import zoo
    from autotune.schedule.ledger import Ledger
    from autotune.sim import ClusterSpec, Job, SimulatedObjective, simulate
    from autotune.sim.predict import prior
    from autotune.store import Store
    from autotune.store.fingerprint import model_graph
    from autotune.store.origin import warm_start_line
    from autotune.store.warmstart import warm_start_sources
    from autotune.tuning.tuner import Tuner

    cluster = cluster_src if isinstance(cluster_src, ClusterSpec) else ClusterSpec.from_json(cluster_src)
    module = zoo.build(model, device="meta")  # shapes only, no memory
    sim_job = Job.from_shapes(zoo.module_gradient_shapes(module), compute_s=compute_ms / 1e3,
                              backward_fraction=backward_fraction,
                              batch_per_worker=batch_per_worker, name=model)
    objective = SimulatedObjective(sim_job, cluster, noise=noise, seed=seed, allow_lossy=allow_lossy,
                                   fixed=fixed)
    space = objective.space
    mg = model_graph(module)
    tg = cluster_graph(cluster.machines, cluster.workers_per_machine, cluster.server_machines)
    default = space.default()
    world = {"workers": cluster.workers, "servers": cluster.server_machines,
             "machines": cluster.machines, "workers_per_machine": cluster.workers_per_machine,
             "cluster": {k: v for k, v in cluster.to_dict().items() if k != "topology"}}
    with Store(db) as store:
        sources = warm_start_sources(store, mg, tg, space, unit=SHOWN_UNIT,
                                           machines=cluster.machines)
        warm_from_store = [c for c, _ in sources]
        warm = warm_from_store + [c for c in space.seeds() if c not in warm_from_store]
        run_id = store.start_run(job=job or f"tune-sim:{model}", world=world, backend="simulated",
                                 model_graph=mg, topology_graph=tg, space_facts=dict(space.facts),
                                 simulated=True)
        tuner = Tuner(space, budget=budget, techniques=techniques, seed=seed, warm_start=warm,
                      reference=default, prior=prior(sim_job, cluster),
                      **({"trial_iterations": trial_iterations} if trial_iterations else {}))
        ledger = Ledger(space, tuner, store, run_id)
        for config, origin in sources:
            ledger.came_from(config, origin)
        shown = display or TuningDisplay(budget)
        if sources and display is not None:  # which stored runs it starts from
            shown.say(warm_start_line([o for _, o in sources]))
        top: float | None = None  # the best trial's score so far (what the display shows)
        try:
            # a library section: a stop signal is recorded (not raised inside whatever
            # runs: a finaliser swallows an exception raised in it, and the signal with
            # it) and raised between trials, each trial whole (autotune.signals)
            with deferred():
                while (trial := ledger.ask()) is not None:
                    check()
                    shown.describe(describe_trial(trial.index, trial.technique, top,
                                                  SHOWN_UNIT))
                    scores = objective.samples(trial.config, trial.iterations)
                    for x in scores:
                        ledger.sample(trial.config, x)
                    step = objective.estimate(trial.config).step_s
                    rec = ledger.finish(trial, sum(scores) / len(scores),
                                        wall_time=trial.iterations * step)
                    shown.advance(trial.iterations)
                    top = rec.score if top is None or (rec.score or 0) > top else top
                    shown.trial(rec.index, rec.technique, rec.config, rec.score, top,
                                SHOWN_UNIT, rec.error)
        except BaseException as exc:  # Ctrl-C/SIGTERM: aborted, trials kept; else failed
            with shielded(isinstance(exc, KeyboardInterrupt)):
                ledger.close(status_of(exc))
                shown.stop()
            raise
        ledger.close("finished")
        result = ledger.results()
        shown.stop(kept_summary(result["best_config"], result["best_score"], SHOWN_UNIT))
        run = store.run(run_id)
        trials = store.trials(run_id)
    best = (result["best_config"], result["best_score"]) if result["best_config"] else None
    best_cfg = best[0] if best else default
    est_best, est_default = objective.estimate(best_cfg), objective.estimate(default)
    ddp = simulate(sim_job, cluster, DDP_LIKE)
    # the DDP-like configuration drawn like the kept one (as many iterations, same noise),
    # so that the speed-up over it compares like with like (autotune.speedup)
    ddp_draws = measure(objective.samples(DDP_LIKE, result["best_iterations"] or 1))
    return {
        "mode": "simulated", "best": best_cfg, "best_score": result["best_score"],
        "best_spread": result["best_spread"], "default_score": result["default_score"],
        "default_spread": result["default_spread"],
        "ddp_like_score": ddp_draws[0], "ddp_like_spread": ddp_draws[1],
        "predicted": {
            "best": _estimate_dict(est_best), "default": _estimate_dict(est_default),
            "ddp_like": _estimate_dict(ddp),
        },
        "warm_start": warm_from_store, "kept_from": result["kept_from"], "world": world,
        "run": run, "trials": trials,
    }


def _estimate_dict(est: Any) -> dict[str, Any]:
    return {"step_s": est.step_s, "throughput": est.throughput, "comm_s": est.comm_s,
            "exposed_comm_s": est.exposed_comm_s, "bottleneck": est.bottleneck,
            "nic_bytes": est.nic_bytes}
