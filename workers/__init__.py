"""What runs inside Ray actors: rank actor, rendezvous, the sharded engine,
models, resumable data, the train loop and its metrics.

Modules that the control plane imports (config, group, rank_actor) must not
import torch at module level; the engine modules do.
"""
