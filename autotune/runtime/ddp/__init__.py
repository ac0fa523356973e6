"""autotune inside DDP: the comm hook (:mod:`~autotune.runtime.ddp.ddp_hook`) that hands
DDP's gradient buckets to the runtime, and the buckets over the runtime's round
(:mod:`~autotune.runtime.ddp.ddp_buckets`)."""
