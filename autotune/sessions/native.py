"""The session of the native runtime: the torch world, the runtime and the trial schedule.

Every iteration boundary is a ``Runtime.sync``: the leader's configuration for the next
iteration crosses the wire as an int64 tensor and every rank, servers included, applies
it. What runs when is the leader's :class:`~autotune.tuning.schedule.TrialSchedule`; this
module measures iterations (the slowest worker's time), applies what the schedule says,
and survives failures: a configuration that fails (an exception or a timeout in the
runtime) is scored as failed, the iteration's gradients are averaged again under the last
good configuration, and training goes on; lost servers shrink the space.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
import warnings
from datetime import timedelta
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist

from autotune.errors import install_excepthook
from autotune.runtime.errors import RuntimeFault, ServerLost, UsageError
from autotune.sessions.base import DDP, TuningSession
from autotune.sessions.options import SessionOptions
from autotune.sessions.parity import DDPParity
from autotune.sessions.tuners import job_space
from autotune.signals import shielded, status_of
from autotune.tuning.space import Config


def init_world(timeout: float) -> None:
    """Initialise ``torch.distributed`` from the environment unless the user has."""
    if dist.is_initialized():
        return
    needed = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    missing = [k for k in needed if k not in os.environ]
    if missing:
        raise UsageError(
            "autotune.session() needs a torch.distributed world"
            + (launcher_hint() or ": start the script with `autotune launch --workers N "
               "script.py` or `torchrun`, or call torch.distributed.init_process_group() "
               f"first (missing env: {', '.join(missing)})"))
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    atexit.register(_destroy_world)  # the session made the world, so it ends it at exit


def launcher_hint() -> str:
    """What to add when a framework's launcher started this script as one process (else
    ""): ``accelerate launch --num_processes 2`` on a machine without GPUs runs one plain
    process (its simple launcher, which sets ``ACCELERATE_USE_CPU`` and no ``RANK``)
    unless told ``--multi_gpu``, which on CPU starts the processes on gloo."""
    if "ACCELERATE_USE_CPU" in os.environ and "WORLD_SIZE" not in os.environ:
        return (", and `accelerate launch` started one process: without GPUs add "
                "`--multi_gpu` (`accelerate launch --multi_gpu --num_processes 2 script.py` "
                "runs gloo on CPU)")
    return ""


def _destroy_world() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class Session(TuningSession):
    """The native runtime's session: autotune averages the gradients itself (a
    multi-stream Communication Service, Summation Services) and keeps DDP's semantics.
    Made by ``autotune.session(model, ...)`` for a plain module."""

    takes_ddp = False  # DDPSession, the same runtime with DDP in front, takes DDP models
    grad_views: bool | None = None  # the runtime's (None: AUTOTUNE_GRAD_VIEWS decides)

    def __init__(self, model: torch.nn.Module, options: SessionOptions | None = None) -> None:
        if isinstance(model, DDP) and not self.takes_ddp:
            raise TypeError(
                "Session is the native runtime, which does DDP's work itself: pass the module "
                "(Session(model.module, ...)), or autotune.session(ddp_model, ...) to keep DDP "
                "and tune its communication")
        super().__init__(model, options)
        self.rt: Any = None
        self.parity: DDPParity | None = None
        self._servers_dropped = False
        self._micro = False  # a no_sync() block ended since the last iteration

    @property
    def is_leader(self) -> bool:
        """Whether this rank is the runtime's leader: the first *worker*, whichever ranks
        are servers. It tunes, records to the store, shows progress and sends the stop."""
        return self.rt is not None and self.rt.info.rank == self.rt.info.leader

    # ------------------------------------------------------------------ set-up
    def _open(self) -> None:
        from autotune.runtime import Runtime

        init_world(self.options.timeout)
        install_excepthook()  # a peer's failure, uncaught, is one line
        self.rt = Runtime.bootstrap(timeout=self.options.timeout, grad_views=self.grad_views)
        if self.rt.info.role == "server":
            # A server rank that ran the user's script: serve, then leave the process.
            from autotune.server import serve_to_the_end

            serve_to_the_end(self.rt)
            raise SystemExit(0)
        try:
            self._start()
        except BaseException as exc:
            # e.g. the workers' models differ: release the runtime, close the run (if the
            # leader opened one), let the error out.
            self._close(exc)
            raise

    def _start(self) -> None:
        """Workers: register, start like DDP, build the space, apply the first config."""
        self.info = self.rt.info
        self.parity = DDPParity(self.model, self.rt, self.options.broadcast_buffers)
        self.rt.register(self.parity.params)
        self.parity.start()
        self.space = job_space(self.rt, allow_lossy=self.options.allow_lossy,
                               fixed=self.options.fixed)
        self._measures(self.parity.params)
        if not self.is_leader:
            self._apply(None)
            return
        self._apply(self._lead(self.parity.params, dist.get_backend()))

    # ------------------------------------------------------------ the hot path
    def _await_average(self) -> tuple[str | None, float | None] | None:
        """Wait until every ``.grad`` holds the averaged gradient; a configuration that
        fails there is scored as failed and the same gradients are averaged again under
        the last one that worked (lost servers are dropped first). None after a micro-step
        (its backward ran inside ``no_sync()``): not an iteration."""
        if self.rt.accumulating:
            raise UsageError("tuner.step() inside tuner.no_sync(): leave the block for the "
                             "last micro-batch's backward, then call step()")
        if not self.rt.gradients_arrived():
            if self._micro:  # the backward since the last step ran inside no_sync()
                self._micro = False
                return None
            raise UsageError("tuner.step() with no backward since the last step: call it "
                             "once per iteration, after loss.backward()")
        self._micro = False
        if self._efficiency_probe is not None:  # .grad is still local (overlaps the communication)
            self._efficiency_probe.sample.local_params(self.parity.params)
        failed: str | None = None
        waited = time.perf_counter()
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
            self._apply(self.schedule.fallback() if self.is_leader else None, retrying=True)
            self.rt.retry()
        waited = time.perf_counter() - waited
        self.parity.check()
        if self._efficiency_probe is not None:
            self._efficiency_probe.sample.averaged_params(self.parity.params)
        return failed, waited

    def _worker_sum(self, t: torch.Tensor) -> None:
        self.rt.worker_sum(t)

    @contextlib.contextmanager
    def _accumulate(self) -> Iterator[None]:
        with self.rt.no_sync():
            yield
        self._micro = True  # a step() now, before the next backward, is a micro-step

    def _lose_servers(self, exc: ServerLost) -> None:
        """Servers stopped; the runtime already dropped them. Shrink the space to what is
        left; the leader reports, records, and starts the tuning over at the next step."""
        if self._servers_dropped:
            return
        self._servers_dropped = True
        self.space = job_space(self.rt, allow_lossy=self.options.allow_lossy,
                               fixed=self.options.fixed)
        if self.is_leader:
            self.schedule.servers_lost(self.space, exc.servers, str(exc), self.config)

    def _put_in_force(self, config: Config | None) -> Mapping[str, Any]:
        return self.rt.sync(config)

    def _sync_each_iteration(self) -> bool:
        return self.rt.needs_sync  # push/pull: the Summation Services serve a round a sync

    def _apply_fault(self, exc: RuntimeFault, config: Config | None,
                     retrying: bool) -> Config | None:
        if not exc.recoverable:
            raise exc
        if isinstance(exc, ServerLost):
            # lost at an iteration boundary: nothing to average again; keep the
            # configuration if it can still run, the tuner starts over next step
            self._lose_servers(exc)
            if self.is_leader and config is not None and not self.schedule.allowed(config):
                config = self.schedule.fallback()
            return config
        return self._rejected(config, exc, retrying)

    def _close(self, exc: BaseException | None) -> None:
        if self.parity is not None:
            self.parity.remove()
        if exc is not None:
            # Another rank may be waiting in a collective: don't join one, just release
            # (this rank's own failure is posted first: the others name it and its cause).
            # Stopped by Ctrl-C/SIGTERM: no further signal cuts the closing short.
            with shielded(isinstance(exc, KeyboardInterrupt)):
                self.display.settled(None, status_of(exc))
                self.rt.shutdown(failed=exc)
                if self.is_leader:
                    self._finish(exc)
            return
        try:
            with warnings.catch_warnings():
                # The sync after the last step() opened an iteration nobody runs; the
                # runtime closes it (and says so): expected here.
                warnings.simplefilter("ignore", RuntimeWarning)
                if self.is_leader:
                    self.rt.sync(self.config, stop=True)
                else:
                    self.rt.sync()
        except BaseException as stopped:  # e.g. SIGTERM while stopping: close the run
            with shielded(isinstance(stopped, KeyboardInterrupt)):
                self.rt.shutdown()
                if self.is_leader:
                    self._finish(stopped)
            raise
        self.rt.shutdown()
        if self.is_leader:
            self._finish(None)
