"""Control plane: settings, job spec, store, state machine, supervisor.

Ray's token auth stays on when the control plane joins a cluster: Ray reads
RAY_AUTH_MODE once, when it is first imported, so it is set here, before any
module of ours imports ray (an explicit setting in the environment wins).
"""

import os

os.environ.setdefault("RAY_AUTH_MODE", "token")
