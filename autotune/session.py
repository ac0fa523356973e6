"""The training-loop wrapper: ``autotune.session()``.

It joins the ``torch.distributed`` world (initialising it from the environment when the
user has not), bootstraps the communication runtime, and on rank 0 drives a
:class:`~autotune.tuning.tuner.Tuner` over the space built from the job's facts. Every
iteration boundary is a ``Runtime.sync``: rank 0's configuration for the next iteration
crosses the wire as an int64 tensor and every rank, servers included, applies it.

The first ``warmup`` iterations (default 3) run under the default configuration and are
not trials: they pay for first allocations and connections, which would otherwise count
against whichever configuration is tried first. Their times give the physics prior its
network rate; across machines the last of two or more runs the default with
:data:`PROBE_STREAMS` streams, so that a per-flow cap (one TCP flow held far below the
NIC rate, as on cloud NICs) shows: the prior then favours several streams, and the
first trials are the seed configurations with that many streams. A trial lasts ``trial.iterations``
iterations. The first iteration after a switch is not scored (it pays for the switch);
the others are timed on every worker, and the median of the slowest worker's times is the
trial's time. The score is throughput: samples/s when ``samples_per_step`` is given,
iterations/s otherwise. A trial whose first scored iteration reaches less than
``cut_short`` (default 0.5) of the best score so far ends there, and its remaining
iterations go back to the budget: bad configurations cost little training time. One
clearly slow already on its unscored switch iteration (under ``cut_short`` of the best
even after :data:`SWITCH_MARGIN` for the switch's own cost) ends after that one.
Tuning iterations train the model like any other: no step is wasted. After ``budget``
iterations the best configuration is kept for the rest of the run (and re-tuned briefly
if ``retune_on_drift`` is set and throughput drops).

It keeps DDP's semantics (docs/ddp.md): the leader's parameters and buffers at the
start, the leader's buffers before each training forward (``broadcast_buffers``),
``no_sync()`` for gradient accumulation, and a clear :class:`UsageError` for two backward
passes in one iteration or a parameter added after the start. The leader is the
runtime's: the first worker, whichever ranks are servers.

A configuration that fails (an exception or a timeout in the runtime) is scored as
failed, the iteration's gradients are averaged again under the last good configuration,
and training goes on; the failure is reported on rank 0 and recorded.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from autotune.runtime.errors import ServerLost, UsageError
from autotune.tuning.space import Config, ConfigError, SearchSpace
from autotune.tuning.trials import TrialDriver, TrialRecord
from autotune.tuning.tuner import Trial, Tuner

__all__ = ["Session", "session", "TrialRecord"]

#: How much slower than the configuration's steady iterations its first one (the switch:
#: new buffers, first use of stream groups) may be. A trial whose switch iteration is
#: under ``cut_short`` of the best even when divided by this stops there. Measured on 22
#: trials of a loopback session (2 workers + 1 server, docs/tuner.md): the switch
#: iteration took 0.77-1.43x a steady one (median 1.07, 90th percentile 1.30).
SWITCH_MARGIN = 2.0


def trial_seconds(scored: list[float], switch_s: float, cut: bool) -> float:
    """The time per iteration a trial is scored with: the median of its ``scored``
    iterations; with none, its switch iteration ``switch_s``, divided by
    :data:`SWITCH_MARGIN` if the trial was ``cut`` there as clearly slow (at best that much
    faster: it stays slow), as it is if the trial had no other iteration (the end of the
    budget: counted with the switch's cost rather than credited with an optimistic bound)."""
    if scored:
        return statistics.median(scored)
    return switch_s / SWITCH_MARGIN if cut else switch_s


#: Streams of the last warm-up iteration (when there are two or more, across machines):
#: enough flows to fill a NIC whose single flow is capped at a quarter of it or more.
PROBE_STREAMS = 4


@dataclass
class _Drift:
    threshold: float
    window: int
    budget: int


def _init_world(timeout: float) -> None:
    if dist.is_initialized():
        return
    needed = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    missing = [k for k in needed if k not in os.environ]
    if missing:
        raise UsageError(
            "autotune.session() needs a torch.distributed world: start the script with "
            "`autotune launch --workers N script.py` or `torchrun`, or call "
            f"torch.distributed.init_process_group() first (missing env: {', '.join(missing)})"
        )
    from datetime import timedelta

    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))


class Session:
    """Created by :func:`session`; use it as a context manager around the loop."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        budget: int = 100,
        db: str | os.PathLike | None = None,
        allow_lossy: bool = False,
        samples_per_step: int | None = None,
        techniques: Sequence[str] = ("grid", "pbt", "bayes", "hyperband"),
        seed: int = 0,
        verbose: bool = True,
        retune_on_drift: float | None = None,
        drift_window: int = 50,
        timeout: float = 300.0,
        trial_iterations: int | None = None,
        warmup: int = 3,
        cut_short: float | None = 0.5,
        job: str | None = None,
        store: bool = True,
        broadcast_buffers: bool = True,
        prior: bool = True,
    ) -> None:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            raise TypeError(
                f"session() got a model wrapped in {type(model).__name__}: the session does "
                "DDP's work itself. Pass the module: autotune.session(model.module, ...), or "
                "build the model without the wrapper")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"session() needs an nn.Module, got {type(model).__name__}")
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        if samples_per_step is not None and samples_per_step <= 0:
            raise ValueError(f"samples_per_step must be positive, got {samples_per_step}")
        if retune_on_drift is not None and not 0 < retune_on_drift < 1:
            raise ValueError(f"retune_on_drift is a fraction in (0, 1), got {retune_on_drift}")
        self.model = model
        self.budget = budget
        self.db = db
        self.allow_lossy = allow_lossy
        self.samples_per_step = samples_per_step
        self.techniques = tuple(techniques)
        self.seed = seed
        self.verbose = verbose
        self.timeout = timeout
        self.trial_iterations = trial_iterations
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        if cut_short is not None and not 0 < cut_short < 1:
            raise ValueError(f"cut_short is a fraction in (0, 1) or None, got {cut_short}")
        self._warmup_left = warmup
        self._warmup_times: list[float] = []  # the warm-up iterations' times (the prior's B)
        self._probe: Config | None = None      # the last warm-up's several-stream default
        self._probe_times: list[float] = []
        self.cut_short = cut_short
        self.job = job
        self.use_store = store
        self.broadcast_buffers = broadcast_buffers
        self.use_prior = prior
        self._drift = _Drift(retune_on_drift, drift_window, max(10, budget // 5)) if retune_on_drift else None

        self.trials: TrialDriver | None = None  # the leader's trials (autotune.tuning.trials)
        self.iteration = 0          # iterations completed (step() calls)
        self.tuning_iterations = 0  # iterations spent inside trials
        self.config: Config | None = None
        self._best: tuple[Config, float] | None = None
        self.rt = None
        self.tuner: Tuner | None = None
        self.space: SearchSpace | None = None
        self._trial: Trial | None = None
        self._trial_index = -1
        self._trial_left = 0
        self._trial_times: list[float] = []
        self._switch_s: float | None = None
        self._trial_start = 0.0
        self._last_good: Config | None = None
        self._t_last: float | None = None
        self._locked = False
        self._window: list[float] = []
        self._progress = None
        self._store = None
        self._run_id = None
        self._registered: set[int] = set()
        self._model_hooks: list[Any] = []
        self._buffers_next = True   # DDP's require_forward_param_sync
        self._replan = False        # leader: servers were lost, the tuner must start over
        self._servers_dropped = False

    # ------------------------------------------------------------------ set-up
    @property
    def rank(self) -> int:
        return self.rt.info.rank if self.rt is not None else 0

    @property
    def is_leader(self) -> bool:
        """Whether this rank is the runtime's leader: the first *worker*, whichever ranks
        are servers. It tunes, records to the store, shows progress and sends the stop."""
        return self.rt is not None and self.rt.info.rank == self.rt.info.leader

    def __enter__(self) -> "Session":
        from autotune.runtime import Runtime

        _init_world(self.timeout)
        self.rt = Runtime.bootstrap(timeout=self.timeout)
        if self.rt.info.role == "server":
            # A server rank that ran the user's script: serve, then leave the process.
            from autotune.server import serve

            serve(self.rt)
            self.rt.shutdown()
            raise SystemExit(0)
        try:
            self._start()
        except BaseException:
            # e.g. the workers' models differ: release the runtime, let the error out.
            self._stop_progress()
            self.rt.shutdown()
            raise
        return self

    def _start(self) -> None:
        """Workers: register, start like DDP, build the space, apply the first config."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.rt.register(params)
        self._registered = {id(p) for p in params}
        self._start_like_ddp()
        self.space = self._build_space()
        if self.is_leader:
            self._open_store()
            self.trials = TrialDriver(self.space, None, self._store, self._run_id)
            warm = self._warm_start()
            restarted = self._restarted_best()
            if restarted is not None:
                # torchrun --max-restarts brought the job back: no tuning again
                self._say(f"restart {os.environ['TORCHELASTIC_RESTART_COUNT']}: keeping the "
                          f"stored best configuration of job {self._job_name()!r}")
                self._locked = True
                self._apply(restarted)
                return
            if self.budget == 0:
                # No tuning: the best stored configuration of a similar job, or the default.
                self._locked = True
                self._best = None
                self._apply(warm[0])
                return
            self._tuner(self.budget, self.seed, warm)
            self._start_progress()
        if self.is_leader:
            self._probe = self._flow_probe()
            first = self.space.default() if self._warmup_left else self._next_trial()
            self._apply(first)
        else:
            self._apply(None)

    def _tuner(self, budget: int, seed: int, warm: list[Config]) -> Tuner:
        """A Tuner over this job's space: the default as its reference (measured as long
        as the kept configuration) and, unless ``prior=False``, the simulator's prediction
        for this job as its physics prior."""
        extra = {"trial_iterations": self.trial_iterations} if self.trial_iterations else {}
        self.tuner = Tuner(self.space, budget=budget, techniques=self.techniques, seed=seed,
                           warm_start=warm, reference=self.space.default(),
                           prior=self._prior() if self.use_prior else None, **extra)
        self.trials.space, self.trials.tuner = self.space, self.tuner
        return self.tuner

    def _prior(self):
        """The simulator on what this job knows (:func:`autotune.sim.predict.job_prior`):
        its gradients in ready order (reverse registration), the world, the device, and
        the network rate its warm-up iterations imply (built at the first prediction,
        which comes after the warm-up)."""
        from autotune.sim.predict import job_prior

        info = self.rt.info
        sizes = self._grad_sizes()
        if not sizes:
            return None
        cuda = next(p for p in self.model.parameters() if p.requires_grad).is_cuda
        made: list = []

        def predict(configs):
            if not made:
                made.append(job_prior(sizes, machines=info.n_machines,
                                      workers_per_machine=info.workers_per_machine,
                                      servers=len(info.servers),
                                      device="gpu" if cuda else "cpu",
                                      batch_per_worker=self.samples_per_step or 1,
                                      **self._link_estimate(sum(sizes))))
            return made[0](configs)
        return predict

    def _grad_sizes(self) -> list[int]:
        """Bytes of each gradient, in ready order (reverse registration)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        return [p.numel() * p.element_size() for p in reversed(params)]

    def _link_estimate(self, grad_bytes: int) -> dict[str, float]:
        """The link rates the warm-up iterations imply (:func:`autotune.sim.predict.warmup_link`:
        the NIC rate and, if several streams ran much faster than one, the per-flow cap);
        ``{}`` (the simulator's defaults) on one machine."""
        from autotune.sim.predict import warmup_link

        if self.rt.info.n_machines < 2:
            return {}
        return warmup_link(self._warmup_times, self._probe_times, grad_bytes,
                           len(self.rt.info.workers))

    def _seed_streams(self) -> None:
        """After the warm-up: if it showed a per-flow cap, the tuner first tries the seed
        configurations (``space.seeds()``: the default, push/pull through every server)
        with the probe's streams, the AIACC-Training remedy."""
        if self._probe is None or not self._probe_times or self.tuner is None:
            return
        if "per_flow_gbps" not in self._link_estimate(sum(self._grad_sizes())):
            return
        streams = self._probe["streams"]
        self.tuner.try_first([{**c, "streams": streams} for c in self.space.seeds()])

    def _flow_probe(self) -> Config | None:
        """The default with :data:`PROBE_STREAMS` streams, run as the last warm-up iteration
        (of two or more, across machines): if it is much faster than the default, each TCP
        flow is capped below the NIC rate, and the physics prior is told so."""
        if self._warmup_left < 2 or self.rt.info.n_machines < 2 or "streams" not in self.space.names:
            return None
        default = self.space.default()
        streams = self.space["streams"].nearest(PROBE_STREAMS)
        if streams <= default["streams"]:
            return None
        return self.space.project({**default, "streams": streams})

    def _build_space(self) -> SearchSpace:
        info = self.rt.info
        roots = None
        if info.workers_per_machine > 1:
            try:
                from autotune.probes import local_facts

                facts = local_facts()
                cands = [r for r in facts.root_candidates if r < info.workers_per_machine]
                roots = cands or None
            except Exception as exc:  # probes are advisory; a bad sysfs must not stop training
                warnings.warn(f"topology probe failed, all local workers are root candidates: {exc}")
        if self.rt.lost_servers:
            # what the runtime can still do: all-reduce among the workers on the groups
            # made at bootstrap
            from autotune.runtime.reconfigure import FALLBACK_STREAMS

            return SearchSpace.build(k_max=0, allow_lossy=self.allow_lossy,
                                     max_streams=FALLBACK_STREAMS, transports=("allreduce",))
        return SearchSpace.build(
            k_max=len(info.servers),
            workers_per_machine=info.workers_per_machine,
            root_candidates=roots,
            allow_lossy=self.allow_lossy,
        )

    # ------------------------------------------------------------ the hot path
    def step(self) -> None:
        """Wait until every ``.grad`` holds the averaged gradient, then move the trial on.

        Collective over all workers: every worker calls it once per iteration.
        """
        from autotune.runtime import RuntimeFault

        if self.rt.accumulating:
            raise UsageError("tuner.step() inside tuner.no_sync(): leave the block for the "
                             "last micro-batch's backward, then call step()")
        failed: str | None = None
        try:
            self.rt.wait()
        except RuntimeFault as exc:
            if not exc.recoverable:
                raise
            if isinstance(exc, ServerLost):
                self._lose_servers(exc)
            # Identical on every rank and nothing moved (or the servers were dropped):
            # average the same gradients again under the last configuration that worked.
            failed = str(exc)
            self._apply(self._fallback() if self.is_leader else None, retrying=True)
            self.rt.retry()
        self._check_model()
        elapsed = time.perf_counter() - self._t_last
        # The slowest worker's time; a failure anywhere shows up as infinity.
        slowest = self.rt.worker_max(float("inf") if failed else elapsed)
        self.iteration += 1
        if slowest != float("inf"):
            self._last_good = dict(self.config)
        nxt = self._advance(slowest, failed) if self.is_leader else None
        self._apply(nxt)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """As DDP's ``no_sync``: backward passes inside only accumulate into ``.grad``
        locally; the next backward outside it communicates the accumulated gradient and
        ``step()`` returns its average::

            with tuner.no_sync():
                loss_fn(model(x1), y1).backward()
            loss_fn(model(x2), y2).backward()
            tuner.step()
        """
        with self.rt.no_sync():
            yield

    # ------------------------------------------------------- DDP's semantics
    def _start_like_ddp(self) -> None:
        """As DDP's constructor: every parameter (and with ``broadcast_buffers`` every
        buffer) takes the leader's value, after checking that the workers' models have the
        same shapes; with ``broadcast_buffers`` the leader's buffers also reach every
        worker before each training forward, as under DDP."""
        buffers = list(self.model.buffers()) if self.broadcast_buffers else []
        self.rt.broadcast_from_leader([*self.model.parameters(), *buffers],
                                      "parameters and buffers", check=True)
        if buffers:
            self._model_hooks = [self.model.register_forward_pre_hook(self._pre_forward),
                                 self.model.register_forward_hook(self._post_forward)]

    def _pre_forward(self, module: torch.nn.Module, args: Any) -> None:
        # DDP syncs buffers before a forward that follows a synchronising forward. Forwards
        # without autograd (evaluation) neither sync nor change that, so a leader-only
        # evaluation cannot hang the workers.
        if self._buffers_next and torch.is_grad_enabled():
            self.rt.broadcast_from_leader(list(module.buffers()), "buffers")

    def _post_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.is_grad_enabled():
            self._buffers_next = not self.rt.accumulating

    def _check_model(self) -> None:
        """A parameter that needs a gradient but was not registered at the start (added,
        replaced or unfrozen since) would silently train apart on each worker."""
        for p in self.model.parameters():
            if p.requires_grad and id(p) not in self._registered:
                name = next((n for n, q in self.model.named_parameters() if q is p), "?")
                raise UsageError(
                    f"parameter {name!r} {tuple(p.shape)} was added, replaced or unfrozen "
                    "after the session started, so its gradient is not averaged and the "
                    "workers would train different models. Build the model completely "
                    "(and set requires_grad) before autotune.session(); to change it, "
                    "leave the session and start a new one")

    def _fallback(self) -> Config:
        good = self._last_good
        return good if good is not None and self._allowed(good) else self.space.default()

    def _allowed(self, config: Config) -> bool:
        try:
            self.space.validate(config)
        except ConfigError:
            return False
        return True

    def _lose_servers(self, exc: ServerLost) -> None:
        """Servers stopped; the runtime already dropped them. Shrink the space to what is
        left, report once, record it; the leader's tuner starts over at the next step."""
        if self._servers_dropped:
            return
        self._servers_dropped = True
        self.space = self._build_space()
        if not self.is_leader:
            return
        self._replan = True
        self._say(f"[red]lost server(s)[/] {list(exc.servers)}: {exc}. Training goes on with "
                  "all-reduce among the workers.")
        if self._store is not None:
            self.trials.record(TrialRecord(
                self._trial_index + 1, "fault", dict(self.config or {}), 0, None,
                f"lost server(s) {list(exc.servers)}: {exc}"))

    def _start_over(self, failed: str | None) -> Config:
        """Leader, after a server loss. Settled: keep the configuration if it can still
        run, else re-tune briefly (``budget=0``: the default). Tuning: the trial under way
        failed, and a new tuner over the smaller space gets the budget left, warm-started
        from the best so far if that can still run."""
        self._replan = False
        best = self._best[0] if self._best and self._allowed(self._best[0]) else None
        if self._locked:
            kept = self._best[0] if self._best else self.config
            if kept is not None and self._allowed(kept):
                return kept
            if self.budget == 0:
                return self._fallback()
            budget = max(10, self.budget // 5)
        else:
            if self._warmup_left == 0 and self._trial is not None and self._trial_left > 0:
                self._finish_trial(None, failed or "servers lost")
            budget = self.tuner.remaining if self.tuner is not None else 0
        self._best = (best, self.tuner.score_of(best) or 0.0) if best and self.tuner else None
        if budget <= 0:
            return self._lock()
        self._locked = False
        self._tuner(budget, self.seed + self.iteration, [best] if best else [])
        if self._progress is None:
            self._start_progress()
        if self._warmup_left > 0:
            return self._fallback()
        return self._next_trial()

    def _apply(self, config: Config | None, retrying: bool = False) -> None:
        """``Runtime.sync`` until a configuration is in force. A configuration that cannot
        be applied fails identically on every rank: rank 0 scores its trial as failed
        and proposes the next one (or the fallback), the others just sync again."""
        from autotune.runtime import RuntimeFault

        for _ in range(1000):
            try:
                active = self.rt.sync(config)
                # the runtime's configuration, as a point of this session's space
                self.config = {k: active[k] for k in self.space.names}
                break
            except (ConfigError, RuntimeFault) as exc:
                if isinstance(exc, RuntimeFault) and not exc.recoverable:
                    raise
                if isinstance(exc, ServerLost):
                    # lost at an iteration boundary: nothing to average again; keep the
                    # configuration if it can still run, the tuner starts over next step
                    self._lose_servers(exc)
                    if self.is_leader and config is not None and not self._allowed(config):
                        config = self._fallback()
                    continue
                if self.is_leader:
                    if retrying or self._locked or self._trial is None:
                        config = self._fallback() if config != self._fallback() else self.space.default()
                    else:
                        self._finish_trial(None, f"could not apply the configuration: {exc}")
                        config = self._next_trial()
        else:  # pragma: no cover - every config in a row failing to apply
            raise RuntimeFault("no configuration could be applied: 1000 in a row failed")
        self._t_last = time.perf_counter()

    # --------------------------------------------------------- rank 0: tuning
    def _next_trial(self) -> Config:
        trial = self.tuner.ask() if not self.tuner.done else None
        if trial is None:
            return self._lock()
        self._trial = trial
        self._trial_index += 1
        self._trial_left = trial.iterations
        self._trial_times = []
        self._switch_s = None
        self._trial_start = time.perf_counter()
        self._update_progress()
        return trial.config

    def _advance(self, slowest: float, failed: str | None) -> Config:
        if self._replan:
            return self._start_over(failed)
        if self._locked:
            return self._watch_drift(slowest)
        if self._warmup_left > 0:
            # Warm-up iterations (first allocations, caches, connections) train but are
            # not trials: otherwise the first trial, usually the default, pays for them.
            self._warmup_left -= 1
            if slowest != float("inf"):
                probing = self._probe is not None and self.config == self._probe
                (self._probe_times if probing else self._warmup_times).append(slowest)
            if self._warmup_left == 0:
                self._seed_streams()
                return self._next_trial()
            if self._warmup_left == 1 and self._probe is not None and self._allowed(self._probe):
                return self._probe
            return self.config
        trial = self._trial
        self.tuning_iterations += 1
        self._trial_left -= 1
        first = self._trial_left == trial.iterations - 1
        if failed is not None or slowest == float("inf"):
            self._finish_trial(None, failed or "a worker failed under this configuration")
            return self._next_trial()
        if first:
            self._switch_s = slowest
        else:
            self._trial_times.append(slowest)
            self.trials.sample(trial.config, self._throughput(slowest))
        if self._progress is not None:
            self._progress.advance()
        if self._trial_left > 0 and not self._clearly_slow(slowest, first):
            return trial.config
        score = self._throughput(trial_seconds(self._trial_times, slowest,
                                               cut=self._trial_left > 0))
        self._finish_trial(score, None)
        return self._next_trial()

    def _clearly_slow(self, slowest: float, first: bool) -> bool:
        """Whether the trial is clearly slow: its unscored switch iteration, even allowing
        :data:`SWITCH_MARGIN` for the switch's own cost, or its first scored iteration
        reached less than ``cut_short`` of the best score so far. Then the trial ends
        there and its remaining iterations go back to the budget."""
        best = self.tuner.best
        if self.cut_short is None or best is None:
            return False
        if first:
            return self._throughput(slowest) * SWITCH_MARGIN < self.cut_short * best[1]
        return (len(self._trial_times) == 1
                and self._throughput(slowest) < self.cut_short * best[1])

    def _throughput(self, seconds: float) -> float:
        per_step = self.samples_per_step or 1
        return per_step / max(seconds, 1e-9)

    def _finish_trial(self, score: float | None, error: str | None) -> None:
        trial = self._trial
        if score is None and self._progress is not None:
            self._progress.advance(self._trial_left)
        # A failed trial still used its iterations so far; the tuner's budget counts all.
        # One cut short (clearly slow) gives the rest back to the budget.
        used = trial.iterations - self._trial_left
        rec = self.trials.finish(trial, score, iterations=used, error=error,
                                 wall_time=time.perf_counter() - self._trial_start,
                                 index=self._trial_index)
        rec.switch_s = self._switch_s
        if error is not None:
            self._say(f"[yellow]trial {rec.index} failed[/] ({trial.technique}, {rec.config}): {error}")
        best = self.tuner.best
        self._best = (dict(best[0]), best[1]) if best else self._best
        self._trial_left = 0
        self._update_progress(rec)

    def _lock(self) -> Config:
        """The budget is spent: keep the best configuration from now on."""
        self._locked = True
        self._window = []
        self._stop_progress()
        return self._best[0] if self._best else self._fallback()

    def _watch_drift(self, slowest: float) -> Config:
        cfg = self._best[0] if self._best else self.config
        if self._drift is None or self._best is None or slowest == float("inf"):
            return cfg
        self._window.append(slowest)
        if len(self._window) < self._drift.window:
            return cfg
        now = self._throughput(statistics.median(self._window))
        self._window = []
        if now >= (1 - self._drift.threshold) * self._best[1]:
            return cfg
        self._say(
            f"[yellow]throughput drifted[/] from {self._best[1]:.2f} to {now:.2f}/s: re-tuning "
            f"for {self._drift.budget} iterations"
        )
        # The old best is stale: measure it again first, alongside its neighbours.
        old = self._best[0]
        self._best = None
        self._locked = False
        self._tuner(self._drift.budget, self.seed + self.iteration, [old])
        self._start_progress()
        return self._next_trial()

    # --------------------------------------------------------------- results
    @property
    def best(self) -> Config | None:
        """The configuration the session settled on (on rank 0: the best measured so far)."""
        if self._best is not None:
            return dict(self._best[0])
        return dict(self.config) if self.config is not None else None

    @property
    def history(self) -> list[TrialRecord]:
        """Every trial so far (leader)."""
        return self.trials.history if self.trials is not None else []

    @property
    def failures(self) -> list[TrialRecord]:
        return self.trials.failures if self.trials is not None else []

    def _measured(self, config: Config | None) -> tuple[float, float, int] | None:
        return self.trials.measured(config) if self.trials is not None else None

    @property
    def best_score(self) -> float | None:
        """The kept (best) configuration's mean throughput over its scored iterations:
        the one "best" number of the progress bar, the table, the store and the report."""
        m = self._measured(self._best[0]) if self._best else None
        return m[0] if m else (self._best[1] if self._best else None)

    @property
    def best_spread(self) -> float | None:
        """Standard deviation of the kept configuration's scored iterations."""
        m = self._measured(self._best[0]) if self._best else None
        return m[1] if m else None

    @property
    def default_score(self) -> float | None:
        """The default configuration's mean throughput over its scored iterations (the
        Tuner measures it as long as the kept one)."""
        m = self._measured(self.space.default()) if self.space else None
        return m[0] if m else None

    @property
    def default_spread(self) -> float | None:
        m = self._measured(self.space.default()) if self.space else None
        return m[1] if m else None

    @property
    def unit(self) -> str:
        """What the scores count: ``samples/s`` with ``samples_per_step``, else ``it/s``."""
        return "samples/s" if self.samples_per_step else "it/s"

    @property
    def tuning(self) -> bool:
        """True while trials are running (rank 0 only knows)."""
        return not self._locked

    def __exit__(self, exc_type, exc, tb) -> None:
        for h in self._model_hooks:
            h.remove()
        self._model_hooks = []
        if exc_type is not None:
            # Another rank may be waiting in a collective: don't join one, just release.
            self._stop_progress()
            self.rt.shutdown()
            if self.is_leader and self.trials is not None:
                self._close_run("failed")
            return None
        with warnings.catch_warnings():
            # The sync after the last step() opened an iteration nobody runs; the runtime
            # closes it (and says so): expected here.
            warnings.simplefilter("ignore", RuntimeWarning)
            if self.is_leader:
                self.rt.sync(self.config, stop=True)
            else:
                self.rt.sync()
        self.rt.shutdown()
        if self.is_leader:
            self._stop_progress()
            self._record()
            if self.verbose:
                self._report()
        return None

    # ----------------------------------------------------- store and output
    def _open_store(self) -> None:
        if not self.use_store:
            return
        try:
            from autotune.store import Store
            from autotune.store.fingerprint import model_graph
        except ImportError:
            self._store = None
            return
        self._store = Store(self.db)
        info = self.rt.info
        self._model_graph = model_graph(self.model)
        self._topology_graph = self._cluster_graph()
        self._run_id = self._store.start_run(
            job=self._job_name(),
            world={"workers": len(info.workers), "servers": len(info.servers),
                   "machines": info.n_machines, "workers_per_machine": info.workers_per_machine},
            backend=dist.get_backend(),
            model_graph=self._model_graph,
            topology_graph=self._topology_graph,
            space_facts=dict(self.space.facts),
            unit=self.unit,
        )

    def _job_name(self) -> str:
        return self.job or Path(os.environ.get("AUTOTUNE_JOB", "session")).name

    def _restarted_best(self) -> Config | None:
        """Under ``torchrun --max-restarts``, after a restart (``TORCHELASTIC_RESTART_COUNT``
        > 0): the best configuration stored by an earlier run of the same job, if it still
        fits this job's space."""
        try:
            restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        except ValueError:
            restarts = 0
        if restarts <= 0 or self._store is None:
            return None
        try:
            runs = self._store.runs(job=self._job_name())
        except Exception as exc:
            warnings.warn(f"could not read earlier runs from the results store: {exc}")
            return None
        for run in runs:
            if run["id"] != self._run_id and run.get("best_config"):
                try:
                    return self.space.validate(run["best_config"])
                except ConfigError:
                    continue
        return None

    def _cluster_graph(self):
        """The job's cluster as a small labelled graph for similarity look-ups: worker
        machines and servers as nodes, joined through one network switch node (O(n)
        edges, so large jobs stay cheap to compare): :func:`autotune.probes.graph.job_graph`."""
        from autotune.probes.graph import job_graph

        info = self.rt.info
        return job_graph(info.n_machines, info.workers_per_machine, len(info.servers))

    def _warm_start(self) -> list[Config]:
        warm: list[Config] = []
        if self._store is not None:
            try:
                warm = self._store.warm_start_configs(self._model_graph, self._topology_graph, self.space)
            except Exception as exc:
                warnings.warn(f"warm start from {self.db or 'autotune.db'} failed: {exc}")
        warm += [c for c in self.space.seeds() if c not in warm]
        return warm

    def _close_run(self, status: str) -> None:
        """Record how the run ended: the kept configuration and its measured numbers."""
        self.trials.keep(self.best)
        self.trials.close(status)

    def _record(self) -> None:
        if self.trials is not None:
            self._close_run("finished")

    def _say(self, text: str) -> None:
        if self.verbose and self.is_leader:
            if self._progress is not None:
                self._progress.say(text)
            else:
                from rich.console import Console

                Console(stderr=True).print(text)

    def _start_progress(self) -> None:
        """Rank 0 shows its tuning as it goes (autotune.progress): a bar in its own
        terminal, events for a launcher that draws the bar, or a plain line per trial."""
        if not self.verbose or self.tuner is None or self.tuner.budget == 0:
            return
        from autotune.progress import tuning_display

        self._progress = tuning_display(self.tuner.budget)

    def _update_progress(self, finished: TrialRecord | None = None) -> None:
        """A trial starts (the bar's description) or ``finished`` (a line of its own)."""
        if self._progress is None:
            return
        from autotune.units import fmt_score

        if finished is not None:
            self._progress.trial(finished.index, finished.technique, finished.config,
                                 finished.score, self.best_score, self.unit, finished.error)
            return
        best = f"best {fmt_score(self.best_score, self.unit)}" if self.best_score else "best -"
        self._progress.describe(f"trial {self._trial_index} {self._trial.technique:9s} {best}")

    def _stop_progress(self) -> None:
        if self._progress is not None:
            from autotune.units import fmt_config, fmt_score

            kept = (f"kept {fmt_config(self._best[0])} at {fmt_score(self.best_score, self.unit)}"
                    if self._best else "")
            self._progress.stop(kept)
            self._progress = None

    def _report(self) -> None:
        from rich.console import Console
        from rich.table import Table

        from autotune.units import fmt_score, fmt_speedup, fmt_value, shown_params

        t = Table(title="autotune: configuration kept")
        t.add_column("parameter")
        t.add_column("value")
        for k, v in shown_params(self.best).items():
            t.add_row(k, fmt_value(k, v))
        n_best = (self._measured(self.best) or (0, 0, 0))[2]
        n_default = (self._measured(self.space.default()) or (0, 0, 0))[2]
        if self.best_score is not None:
            t.add_row("throughput", f"{fmt_score(self.best_score, self.unit, self.best_spread)}"
                      f" ({n_best} iterations)")
        if self.default_score is not None:
            t.add_row("default's throughput",
                      f"{fmt_score(self.default_score, self.unit, self.default_spread)}"
                      f" ({n_default} iterations)")
            if self.best_score:
                t.add_row("speed-up", fmt_speedup(self.best_score, self.default_score))
        t.add_row("trials", f"{len(self.history)} ({len(self.failures)} failed"
                  + (f", {self.tuner.screened} screened out by the prior" if self.tuner
                     and self.tuner.screened else "") + ")")
        best = self.best or {}
        uses_servers = best.get("transport") == "pushpull" and best.get("servers", 0) > 0
        if self.rt.info.servers and not uses_servers:
            idle = self.rt.info.servers
            t.add_row("idle servers", f"{len(idle)} launched server rank(s) sum nothing under "
                      "this configuration: launch without them next time (autotune launch -k 0)")
        Console(stderr=True).print(t)


def session(model: torch.nn.Module, **kwargs: Any) -> Session:
    """Tune the gradient communication of ``model`` while it trains.

    ``with autotune.session(model, budget=100) as tuner:`` then call ``tuner.step()``
    after each ``loss.backward()``. See :class:`Session` for the arguments.
    """
    return Session(model, **kwargs)
