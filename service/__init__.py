"""Control plane: settings, states and the supervisor, and by concern `control` (the
supervisor's parts: requests, views, a job's storage, the leader's loop), `intake` (submit
checks), `scheduling` (pure policies), `run` (the pass, runners, Ray), `store`, `observability`.

Importing it changes nothing in the caller's environment: Ray's token auth
is set where Brigade starts or joins Ray (`service.run.ray_cluster`).
"""
