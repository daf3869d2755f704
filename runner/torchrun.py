"""torchrun (torch.distributed.run), leaving as soon as its agent is done: the supervisor's launcher.

torchrun's agent returns once its workers have exited and the rendezvous is closed; what is left is the
interpreter's teardown of torch, which cost 0.5-0.8 s between the workers' exit and the supervisor seeing
torchrun gone (2 CPU cores; more where the host is slower to unmap), on every notice and every restart.
Here the agent's outcome is the exit status (0, or 1 on a worker's failure, as torchrun's own) and the
process leaves with os._exit. A worker's failure is not printed again: torchrun's report of it (a
traceback ending in a ChildFailedError table) would only repeat the workers' own output, and the
supervisor says in one line why the job stopped; any other error of torchrun's prints its traceback.
"""

from __future__ import annotations

import traceback

from runner.faults import leave


def main() -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun
    try:
        torchrun()
        code = 0
    except SystemExit as exc:   # argument errors, --help
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ChildFailedError:
        code = 1
    except BaseException:   # torchrun's own failure (a rendezvous that timed out, a signal to the agent)
        traceback.print_exc()
        code = 1
    leave(code)


if __name__ == "__main__":
    main()
