"""Running jobs: the scheduling pass that admits and preempts (over the pure policies of
`service.scheduling`), one runner thread per job, the lifecycle's pure decisions, the launch seam
where a runner meets its worker group, recovery accounting, exports, and the one module that
talks to Ray (`ray_cluster`).
"""
