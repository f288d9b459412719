"""The engine's errors that a restart cannot fix.

Torch- and Ray-free (the control plane imports them to tell a rank's failure
apart: `is_permanent`, workers/cluster/errors.py), and picklable, so that they
cross from a rank to the driver.
"""

from __future__ import annotations


class CompileError(RuntimeError):
    """`train.compile` asked for torch.compile, and the compiler cannot run
    here (no working C++ compiler, an inductor or dynamo failure): the same
    code on the same machines fails the same way again, so the job fails at
    once, its message carrying the compiler's reason, without using up its
    restarts."""


class BaseMismatch(RuntimeError):
    """An adapter job's checkpoint was trained on other base weights (or
    another model config) than the job's `init` now holds: its adapters mean
    nothing on this base, and a restart reads the same files again."""
