"""The soak, longer than CI's: many tenants' jobs through one `brigade serve`
while ranks are SIGKILLed and SIGTERMed, the server is killed and restarted
and the checkpoint disk fills, then everything that must hold checked.

    .venv/bin/python -m bench.soak [--jobs 150] [--over 300] [--kills 12] [--terms 6] [--seed 17]
    .venv/bin/python -m bench.soak --jobs 300 --over 600 --kills 24 --terms 12   # the long one, ~20 min

The driver is the CI soak's (tests/soak/soak_driver.py, its plan and checks
beside it): 4 tenants (weights 3:2:1:1, quotas of 1 to 3 workers, priority
ceilings 0..100), jobs of three tiny GPT configs at sizes 1, 2 and elastic
1..2, random priorities, two of them given unreadable data on purpose; the
server is restarted twice and the disk (a tmpfs under the checkpoint storage)
filled once, whatever the other counts. Root is needed for the tmpfs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from bench.report import OUT, Figure, Goal, cli


def add_args(parser) -> None:
    parser.add_argument("--jobs", type=int, default=None, help="default 150 (--quick: 30)")
    parser.add_argument("--over", type=float, default=None,
                        help="submit them over this many seconds (default 300, --quick 30)")
    parser.add_argument("--kills", type=int, default=None, help="SIGKILLs (default 12, --quick 2)")
    parser.add_argument("--terms", type=int, default=None, help="SIGTERMs (default 6, --quick 1)")
    parser.add_argument("--seed", type=int, default=17)


def run(args) -> Figure:
    from tests.soak.soak_driver import run_soak
    from tests.soak.soak_plan import CONFIGS, TENANTS, SoakPlan

    quick = args.quick
    plan = SoakPlan(seed=args.seed, jobs=args.jobs or (30 if quick else 150),
                    submit_over_s=args.over or (30 if quick else 300),
                    sigkills=args.kills if args.kills is not None else (2 if quick else 12),
                    sigterms=args.terms if args.terms is not None else (1 if quick else 6),
                    serve_restarts=2, disk_fills=1, bad_data_jobs=2,
                    fault_gap_s=(300 if not quick else 30) / 25, drain_timeout_s=600)
    OUT.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="soak-", dir=OUT))
    try:
        result = run_soak(plan, data_dir, say=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    r = result.report
    if "jobs" not in r:  # it stopped before the jobs: no reference run was uninterrupted
        raise SystemExit(result.explain())
    tenants = ", ".join(f"{t.name} (weight {t.weight:g}, {t.max_workers} workers, "
                        f"{t.max_running_jobs} running, priority <= {t.max_priority})" for t in TENANTS)
    configs = ", ".join(f"{name}: {layers} layer(s), {steps} steps, checkpoint every {every}"
                        for name, (layers, steps, every) in CONFIGS.items())
    held = ", ".join(f"{p} {v:g}" for p, v in r["goodput"]["phases_worker_s"].items() if v)
    costs = ", ".join(f"{kind} {c['median_s']} s / {c['max_s']} s ({c['attempts_ended']})"
                      for kind, c in r["fault_cost_s"].items())
    peaks = ", ".join(f"{t} {v['workers']}, {v['jobs']}" for t, v in r["peak_held"].items())
    lines = [
        f"`brigade serve` with its own Ray head (4 logical CPUs on these 2 cores), the chaos tests' "
        f"settings (process-group timeout 5 s, restart backoff 1 s), checkpoints on a 768 MiB tmpfs. "
        f"{plan.jobs} jobs (seed {plan.seed}) submitted over {plan.submit_over_s:g} s by 4 tenants: "
        f"{tenants}; GPT d_model 32, seq_len 16, global batch 4 ({configs}); sizes 1, 2 and "
        f"elastic 1..2 ({r['elastic']} elastic); priorities 0, half or all of the tenant's "
        f"ceiling; one uninterrupted reference run per (config, world size) the jobs have "
        f"({r['references']}, in {r['reference_runs']} runs), at priority 1000, alone before the "
        "jobs (a reference that a transient failure interrupted is run again). "
        f"Faults, one every {plan.fault_gap_s:g} s once the references end: {plan.sigkills} SIGKILLs "
        f"and {plan.sigterms} SIGTERMs of a random rank of a random running job, `brigade serve` "
        "SIGKILLed and started again twice, the disk filled once (until a save failed); two jobs "
        "were given token ids past their vocabulary (meant to fail at once, not restarted).",
        "",
        "| figure | this run |",
        "| --- | --- |",
        f"| jobs | {r['jobs']} ({', '.join(f'{k} {v}' for k, v in r['by_tenant'].items())}) |",
        f"| final states | {', '.join(f'{k} {v}' for k, v in r['by_state'].items())} |",
        f"| faults injected | {', '.join(f'{k} {v}' for k, v in r['faults'].items())} |",
        f"| recoveries (first rows of a new attempt) | "
        f"{', '.join(f'{k} {v}' for k, v in r['recoveries'].items()) or 'none'} "
        f"(restarts {r['restarts']}, preemptions {r['preemptions']}) |",
        f"| recovery time median / max | {r['recovery_s_median']} s / {r['recovery_s_max']} s |",
        f"| interruptions, from the events (interrupted -> RUNNING again, median / max) | "
        f"{', '.join(f'{k} {v}' for k, v in r['interruptions'].items()) or 'none'} "
        f"({r['back_running_s_median']} s / {r['back_running_s_max']} s) |",
        f"| lost steps (total / largest) | {r['lost_steps']} / {r['lost_steps_max']} |",
        f"| saves that failed on the full disk | {r['failed_saves']} |",
        f"| `brigade serve` down (kill -> healthy) | {', '.join(f'{s} s' for s in r['serve_down_s'])} |",
        f"| samples: quota (API) / rank actors (Ray) | {r['quota_samples']} / {r['ray_samples']} "
        f"({r['pooled_ranks_seen']} sightings of a warm rank tied to its job by its own answer) |",
        f"| peak held (workers, jobs) | {peaks} |",
        f"| goodput of the soak's tenants (training / held worker-seconds) | {r['goodput']['goodput']} "
        f"of {r['goodput']['worker_seconds']:g} worker-s ({held}) |",
        f"| a job's goodput (training / wall time since submit), median over the jobs | "
        f"{r['job_goodput_median']} |",
        f"| a fault's cost, lost + recovering (median / max, attempts it ended) | {costs} |",
        "",
        "Goodput and a fault's cost come from the service's own phases "
        "(`GET /v1/usage`, `GET /v1/jobs/{id}/goodput`: service/observability/goodput.py). The "
        "cluster's is in worker-seconds over the soak's four tenants (the reference runs left out): "
        "queued time holds no worker and counts nothing; a job's own counts its wall time from "
        "submit, the queue included. A fault's cost is the `lost` + `recovering` seconds of the "
        "attempt it ended (tests/soak/soak_goodput.py): a rank's signal ended the attempt of the job "
        "it hit that was in progress when it was sent, from that attempt's start to the next "
        "attempt's first new step; a server restart or the full disk ended any job's attempt that "
        "entered RESTARTING from the fault to 10 s after it was over, that no rank signal explains "
        "(none: a cost of 0).",
        "",
        "Recovery time is the rows' `recovery_s` (failure seen, or the notice, to the end of the "
        "first new step; preemptions by the scheduler count too); lost steps the rows' `lost_steps`. "
        "A row carries them only where the new attempt's first row is a new step: a job resumed "
        "from a checkpoint before steps it had recorded replays those first, and has none; the "
        "events' count and times take in every interruption (a preempted job's include its wait "
        "in the queue).",
        "",
        ("Every check held: every job SUCCEEDED on its uninterrupted curve (bitwise at a fixed "
         "size, 1e-4 relative for elastic ones) or FAILED for its bad data; none lost, none twice, "
         "none stuck; each step's row once; no tenant over its quota at any sample; nothing left on "
         "Ray; every job's events a legal path through the state machine."
         if not result.problems else
         f"**{len(result.problems)} checks failed:**\n\n"
         + "\n".join(f"- {p}" for p in result.problems[:30])),
    ]
    return Figure(
        name="soak", title="Soak: 4 tenants' jobs under chaos",
        command=(f".venv/bin/python -m bench.soak --jobs {plan.jobs} --over {plan.submit_over_s:g} "
                 f"--kills {plan.sigkills} --terms {plan.sigterms} --seed {plan.seed}"),
        body="\n".join(lines) + "\n",
        headline=(f"{r['jobs']} jobs, {sum(r['faults'].values())} faults, goodput "
                  f"{r['goodput']['goodput']} (worker-s), "
                  f"{sum(r['recoveries'].values())} recoveries (median {r['recovery_s_median']} s, "
                  f"max {r['recovery_s_max']} s), {r['lost_steps']} lost steps"),
        goals=[Goal("every soak check holds", f"{len(result.problems)} problems", not result.problems)],
    )


if __name__ == "__main__":
    cli("soak", __doc__, add_args, run)
