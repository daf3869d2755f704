"""torchrun (torch.distributed.run), leaving as soon as its agent is done: the supervisor's launcher.

torchrun's agent returns once its workers have exited and the rendezvous is closed; what is left is the
interpreter's teardown of torch, which cost 0.5-0.8 s between the workers' exit and the supervisor seeing
torchrun gone (2 CPU cores; more where the host is slower to unmap), on every notice and every restart.
Here the agent's outcome is the exit status (0, or 1 on a worker's failure, as torchrun's own) and the
process leaves with os._exit. A worker's failure is not printed again: torchrun's report of it (a
traceback ending in a ChildFailedError table) would only repeat the workers' own output, and the
supervisor says in one line why the job stopped; any other error of torchrun's prints its traceback.

With COSTSIM_WORKER_START=fork (the supervisor's choice for plans that run on CPUs) the workers
(`-m runner.worker`) are forked from the agent, which has imported torch, the worker's modules and the
workload's declared `imports` (the SDXL UNet's diffusers module: runner.train.preload) once, instead of
each starting a new interpreter that imports them again (torchrun's own start method for a function
entrypoint, `fork`): on every start and restart the workers begin where the imports end (a tiny 20-step
run 5.0 s to 3.2 s on 2 cores). CUDA must not be initialised before a fork, and torchrun's launch config
asks CUDA how many GPUs there are: the agent asks NVML instead (PYTORCH_NVML_BASED_CUDA_CHECK, which
PyTorch provides for this); should an import start CUDA all the same, the agent says so and starts the
workers as new interpreters. GPU plans start their workers as new interpreters (exec, torchrun's way for a
command): on the H200 a forked worker was ready for the load no sooner, the agent's imports before the fork
taking as long as an exec'd worker's start, imports and build (docs/runner-speed.md).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback

from runner import environment, gcstart
from runner.faults import leave

WORKER_MODULE = "runner.worker"   # runner.train behind a pause of the garbage collector (runner.gcstart)
WORKER_STARTS = ("fork", "exec")
# how the workers start (the supervisor sets it for the agent; `runner execute` refuses a bad one of the user's)
WORKER_START = environment.choice("COSTSIM_WORKER_START", "exec", WORKER_STARTS)


def main() -> None:
    gcstart.pause()   # for torch's imports; on again before the agent starts its workers
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run
    try:
        args = parse_args(sys.argv[1:])
        if forked_workers(args):
            run_forked(args)
        else:
            gcstart.resume()
            run(args)
        code = 0
    except SystemExit as exc:   # argument errors, --help
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ChildFailedError:
        code = 1
    except BaseException:   # torchrun's own failure (a rendezvous that timed out, a signal to the agent)
        traceback.print_exc()
        code = 1
    leave(code)


def forked_workers(args) -> bool:
    """Whether this launch forks its workers: the runner's own worker module, a c10d rendezvous (the
    supervisor's: standalone on one node, an endpoint on several), and COSTSIM_WORKER_START not exec."""
    return (WORKER_START == "fork" and args.module and not args.no_python and not args.run_path
            and args.training_script == WORKER_MODULE and (args.standalone or args.rdzv_backend == "c10d"))


def run_forked(args) -> None:
    """torch.distributed.run.run, the workers forked from here running runner.train's main."""
    import uuid

    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args

    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")   # no CUDA in this process: its children fork
    import torch

    import runner.train  # the workers' imports, once, before they are forked
    runner.train.preload(args.training_script_args)   # and their workload's (the SDXL UNet's diffusers)
    if torch.cuda.is_initialized():   # a library started CUDA at its import: a forked worker could not use it
        print("runner: CUDA was initialised while importing the workload; its workers start as new interpreters "
              "(COSTSIM_WORKER_START=exec)", file=sys.stderr, flush=True)
        from torch.distributed.run import run
        gcstart.resume()
        run(args)
        return
    if args.standalone:   # as torchrun's run() does
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    if args.master_port is None:
        args.master_port = 29500
    config, _, _ = config_from_args(args)
    config.start_method = "fork"
    gcstart.resume()   # the imports frozen: neither the agent's collections nor its forked workers' walk them
    elastic_launch(config=config, entrypoint=worker)(*args.training_script_args)


def worker(*argv: str) -> None:
    """A forked worker: the signal handlers a new interpreter has (the agent's raise in it), then the worker."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    gcstart.pause()   # as runner.worker's: until the first step is done
    from runner import train
    try:
        train.main(list(argv), forked=True)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:   # a new interpreter prints its traceback; torch's fork sends it only to the agent
        traceback.print_exc()
        sys.stderr.flush()
        raise


if __name__ == "__main__":
    main()
