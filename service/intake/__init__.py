"""Intake: what the service checks and fixes when a job is submitted, before it is queued.

`checks.py` is the one ordered list of submit checks (each a small function naming the field it
guards), run for `POST /v1/jobs`, `POST /v1/datasets` and anything else that submits a job; the
other modules are what those checks read (a tenant's data prefix, a Hugging Face config, an init
source, token data) and how a dataset's preparation becomes a job.
"""
