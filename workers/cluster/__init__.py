"""The Ray runtime: the worker group and its placement, the warm rank pool, the rank actors
and their calls and output, each node's fork server, the worker-group errors the control
plane tells apart, and the frozen values the group answers it with (`GroupStatus`,
`RankInfo`). No training logic: the actors run the engine's entry point of the job's kind.
"""
