"""One rank of a job, as a Ray actor: it joins the process group and trains.

Defined as a plain class; `WorkerGroup` wraps it with `ray.remote` and places
one per bundle. torch and the engine are imported inside the methods, so the
control plane can import this module without torch. The group creates it with
`max_concurrency=2`: one thread runs `train` while the other answers
`progress`.
"""

from __future__ import annotations

import os

import ray

from workers import distributed


class RankActor:
    def __init__(self, rank: int, world_size: int, num_threads: int):
        self.rank = rank
        self.world_size = world_size
        self.num_threads = num_threads
        # Before torch is imported: its OpenMP pool must not outnumber our CPUs.
        os.environ["OMP_NUM_THREADS"] = str(num_threads)
        self._metrics: list[dict] = []
        self._state = "idle"  # idle | running | done | failed
        self._error: str | None = None
        self._stop_requested = False

    def node_info(self) -> dict:
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "gpu_ids": ray.get_gpu_ids(),
        }

    def choose_rendezvous(self, same_node: bool) -> tuple[str, int]:
        """Rank 0 only: where the others meet it."""
        # Ray's node IP cannot be moved to loopback; on one node we need not use it.
        addr = distributed.LOOPBACK if same_node else ray.util.get_node_ip_address()
        return addr, distributed.free_port(addr)

    def setup(self, addr: str, port: int, timeout_s: float) -> str:
        """Join the process group; returns the backend (NCCL on a GPU, else gloo)."""
        import torch

        torch.set_num_threads(self.num_threads)
        rv = distributed.Rendezvous(
            master_addr=addr,
            master_port=port,
            rank=self.rank,
            world_size=self.world_size,
            timeout_s=timeout_s,
        )
        return distributed.init_process_group(rv)

    def train(
        self, config: dict, checkpoint: dict | None = None, stop_after: int | None = None
    ) -> list[dict]:
        """Train to the end of the job or `stop_after`, resuming from the
        checkpoint target's latest committed step when one is given."""
        from workers.config import CheckpointTarget, JobConfig
        from workers.trainer import Trainer

        self._metrics, self._state, self._error = [], "running", None
        self._stop_requested = False
        try:
            target = None if checkpoint is None else CheckpointTarget.from_dict(checkpoint)
            self._trainer = Trainer(JobConfig.from_dict(config), target)
            result = self._trainer.run(self._record, stop_after, should_stop=self._should_stop)
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            self._state, self._error = "failed", f"{type(e).__name__}: {e}"
            raise
        self._state = "done"
        return result

    def status(self) -> dict:
        """Where `train` is: for a driver that lost its call (it restarted)."""
        return {"state": self._state, "steps": len(self._metrics), "error": self._error}

    def request_stop(self) -> None:
        """Ask `train` to checkpoint and stop at the next step boundary (all
        ranks agree on which: see `Trainer.run`)."""
        self._stop_requested = True

    def _should_stop(self) -> bool:
        return self._stop_requested

    def state_digests(self) -> dict[str, str]:
        """Digests of the last trainer's full state (collective: all ranks at once)."""
        return self._trainer.state_digests()

    def _record(self, metrics: dict) -> None:
        self._metrics.append(metrics)

    def progress(self, since: int = 0) -> list[dict]:
        """The steps recorded so far by the running (or last) `train`, from `since` on."""
        return self._metrics[since:]

    def teardown(self) -> None:
        distributed.destroy_process_group()

    def pid(self) -> int:
        return os.getpid()
