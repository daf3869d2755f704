"""The worker's entry: torchrun runs `-m runner.worker` on every GPU (or CPU process). Python's automatic
garbage collection is paused before runner.train's imports (runner.gcstart), then runner.train's main runs."""

from runner import gcstart

if __name__ == "__main__":
    gcstart.pause()
    from runner import train
    train.main()
