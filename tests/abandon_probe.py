"""Run by tests/test_runner_resume.py in a process of its own (a Trainer installs signal handlers and a
process group): the tiny SDXL UNet's Trainer (its loss scaled by a
random draw) at 2 micro-batches a step abandons a step for a notice agreed
after its first micro-batch, then takes the step; prints whether the abandoned step left the random
state, the gradients and the weights as they were, and the state after the step taken.

  python3 -m tests.abandon_probe RUN_DIR PLAN [abandon|straight]
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from runner import train
from runner.plan import load_run_spec
from runner.state import state_sha256


def main(run_dir: str, plan: str, mode: str) -> None:
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", store=dist.FileStore(str(Path(run_dir) / "store"), 1), rank=0, world_size=1)
    trainer = train.Trainer(train.parse(["--plan", plan, "--run-dir", run_dir, "--run-id", "probe"]),
                            load_run_spec(Path(plan)), 0, 1, 0)
    trainer.restore()
    # as a workload whose loss draws from the process's random state (dropout, say): a factor of 1 +- 0.001
    # on each micro-batch's loss, so the weights after a step depend on the state the step began with
    drawn = trainer.built.loss
    trainer.built.loss = lambda model, data: drawn(model, data) * (1 + 1e-3 * torch.rand(()))
    report: dict = {"accumulation": trainer.accumulation}
    if mode == "abandon":
        # the weights themselves (state_sha256 would initialise the optimizer's state: DCP's state dict does so)
        weights, rng = [p.detach().clone() for p in trainer.model.parameters()], torch.get_rng_state()
        trainer.agree_within, trainer.notice.requested = True, True
        report["taken"] = trainer.train_step()
        report["abandoned_micro_batches"] = trainer.abandoned_micro_batches
        report["rng_kept"] = bool(torch.equal(rng, torch.get_rng_state()))
        report["weights_kept"] = all(torch.equal(p, w) for p, w in zip(trainer.model.parameters(), weights))
        report["optimizer_state"] = len(trainer.built.optimizer.state)
        report["gradients"] = sum(p.grad is not None for p in trainer.model.parameters())
        trainer.notice.requested = False
    report["next_step_taken"] = trainer.train_step()
    report["state"] = state_sha256(trainer.model, trainer.built.optimizer)
    trainer.close()
    dist.destroy_process_group()
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:4])
