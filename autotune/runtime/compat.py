"""torch.distributed names that moved between torch versions (the package accepts >= 2.3)."""

from __future__ import annotations

import torch.distributed as dist

# torch 2.13 renamed the single-tensor collectives and warns on the old names.
all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
