"""The Ray runtime: the worker group and its placement, the warm rank pool, the rank actors
and their calls and output, each node's fork server, and the worker-group errors the control
plane tells apart. No training logic: the actors run the engine's entry point of the job's kind.
"""
