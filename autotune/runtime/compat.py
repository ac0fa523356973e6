"""torch.distributed names that moved between torch versions (the package accepts >= 2.3)."""

from __future__ import annotations

import torch.distributed as dist

# torch 2.13 renamed the single-tensor all-gather and warns on the old name.
all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
