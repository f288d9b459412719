"""The control plane's parts, each over the store: the requests made of jobs
(`requests`), what is shown of them (`views`), where a job's files live
(`storage`), and the leader's loop (`leader`) with its reconcile
(`reconcile`). `service.supervisor.Supervisor` assembles them.
"""
