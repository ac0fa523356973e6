"""DDP's semantics for the native runtime: the same start, the same buffers, no surprises.

As DDP's constructor, every worker takes the leader's parameters (and buffers) after a
check that the workers' models have the same shapes; with ``broadcast_buffers`` the
leader's buffers also reach every worker before each training forward, as under DDP
(``require_forward_param_sync``); and a parameter added, replaced or unfrozen after the
start is a clear error rather than workers that silently train apart. ``no_sync`` is the
runtime's own (:meth:`autotune.runtime.Runtime.no_sync`). See ``docs/ddp.md``.
"""

from __future__ import annotations

from typing import Any

import torch

from autotune.runtime.errors import UsageError


class DDPParity:
    """The start, the buffer hooks and the model check of one session's model."""

    def __init__(self, model: torch.nn.Module, rt: Any, broadcast_buffers: bool = True):
        self.model = model
        self.rt = rt
        self.broadcast_buffers = broadcast_buffers
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._registered = {id(p) for p in self.params}
        self._hooks: list[Any] = []
        self._buffers_next = True  # DDP's require_forward_param_sync

    def start(self) -> None:
        """Every parameter (and with ``broadcast_buffers`` every buffer) takes the
        leader's value; the buffer hooks go on the model."""
        buffers = list(self.model.buffers()) if self.broadcast_buffers else []
        self.rt.broadcast_from_leader([*self.model.parameters(), *buffers],
                                      "parameters and buffers", check=True)
        if buffers:
            self._hooks = [self.model.register_forward_pre_hook(self._pre_forward),
                           self.model.register_forward_hook(self._post_forward)]

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _pre_forward(self, module: torch.nn.Module, args: Any) -> None:
        # DDP syncs buffers before a forward that follows a synchronising forward. Forwards
        # without autograd (evaluation) neither sync nor change that, so a leader-only
        # evaluation cannot hang the workers.
        if self._buffers_next and torch.is_grad_enabled():
            self.rt.broadcast_from_leader(list(module.buffers()), "buffers")

    def _post_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.is_grad_enabled():
            self._buffers_next = not self.rt.accumulating

    def check(self) -> None:
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
