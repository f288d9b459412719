"""Control plane: settings, store, state machine, scheduling, supervisor.

Importing it changes nothing in the caller's environment: Ray's token auth
is set where Brigade starts or joins Ray (`service.run.ray_cluster`).
"""
