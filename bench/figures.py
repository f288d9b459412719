"""The figures of docs/benchmarks.md, in the document's order: name -> title.

Each name is a module `bench.NAME` with `run(args) -> report.Figure`, and
`python -m bench --only NAME` reruns it alone.
"""

TITLES = {
    "overhead": "Engine overhead: Brigade on Ray vs torchrun vs one process",
    "comm": "Communication: bytes per step vs the formulas",
    "tensor_parallel": "Tensor parallelism: TP bytes per step vs the formula, tp 1 vs tp 2",
    "memory": "Memory: per-rank state vs 16 B/param / N",
    "optimizers": "Optimizers: state per rank vs the memory theory, step time",
    "lora": "LoRA adapters: per-rank state vs the memory theory and a full fine-tune",
    "compile": "Compile: steps/s compiled vs eager, compile time at start-up",
    "checkpoint": "Checkpoints: save and load vs the raw disk, async stall",
    "snapshot": "In-memory snapshots: capture and async-save hold vs a memcpy, memory per rank",
    "snapshot_interval": "In-memory snapshots' interval: training time automatic, every step and off",
    "hf_io": "Hugging Face weights: import and export vs raw I/O",
    "startup": "Start-up: submit -> first step vs Ray Train's TorchTrainer",
    "rank_start": "Rank processes: forked from the fork server vs started cold",
    "recovery": "Recovery after a rank is killed",
    "goodput": "Goodput under faults",
    "drain": "Drains: a node's ranks moved before its deadline vs the SIGTERM-only path",
    "api": "API: requests/s vs a bare FastAPI peer, latency at 100 clients",
    "scheduler": "Scheduler: one admission pass over 10,000 queued jobs",
    "forecast": "When a queued job will start",
    "sweeps": "Sweeps: a trial's end to the next one's first step, ASHA against no pruner",
    "ui": "Dashboard: the jobs page over 10,000 jobs, a job of 100,000 steps",
    "data": "Data: token shards' wait per step, a rank's memory, preparation on Ray",
    "mixture": "Data mixtures: each member's share, a step's cost, a resume",
    "soak": "Soak: 4 tenants' jobs under chaos",
}
FIGURES = list(TITLES)
