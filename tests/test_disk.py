"""The disk, for real: checkpoints on a small filesystem (a tmpfs mounted here, as root) that holds one
checkpoint, two, or not even one: the run refuses at the start with one line, makes room by removing the
oldest checkpoints (never the newest complete one), or stops for good with one line when the disk fills
in the middle of a save, leaving no partial checkpoint and no restarts."""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from costsim.contract.plan import Plan
from tests.runner_helpers import events, execute, summary, tiny_plan

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")]


@contextlib.contextmanager
def small_disk(where: Path, size: str):
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def plan_with(tmp_path: Path, *, bytes_: float, keep: int) -> Path:
    path = tiny_plan(tmp_path, interval_steps=20, keep=keep)
    plan = Plan.read(path)
    return replace(plan, checkpoint=replace(plan.checkpoint, bytes=bytes_, keep=keep)).write(path)


def test_a_disk_that_cannot_hold_one_checkpoint_is_refused_before_anything_starts(tmp_path):
    plan = plan_with(tmp_path, bytes_=1.16e6, keep=2)
    with small_disk(tmp_path / "disk", "1m") as disk:
        result = execute(plan, tmp_path / "run", "--steps", "60", "--checkpoint-dir", str(disk / "ckpt"))
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert str(disk / "ckpt") in lines[0]
    assert "room for one checkpoint of 1.2 MB" in lines[0] and "free" in lines[0] and "checkpoint.keep" in lines[0]
    assert not (tmp_path / "run" / "telemetry.jsonl").exists()


def test_keep_makes_room_by_removing_the_oldest_never_the_newest(tmp_path):
    """A 3 MB disk holds two checkpoints of 1.16 MB: with keep 3 the run removes the oldest to write each
    next one, and ends with its final checkpoint."""
    plan = plan_with(tmp_path, bytes_=1.16e6, keep=3)
    with small_disk(tmp_path / "disk", "3m") as disk:
        result = execute(plan, tmp_path / "run", "--steps", "100", "--checkpoint-dir", str(disk / "ckpt"))
        assert result.returncode == 0, result.stderr[-3000:]
        left = sorted(p.name for p in (disk / "ckpt").iterdir() if p.name.startswith("step-"))
    assert "removing checkpoint step-" in result.stderr and "to make room" in result.stderr
    assert "step-100" in left and len(left) <= 2
    assert summary(tmp_path / "run")["steps"] == 100
    removed = events(tmp_path / "run", "checkpoint_removed")   # each removal timed: a notice weighs them
    assert removed and all(e["duration_s"] >= 0 and e["bytes"] > 1e6 for e in removed)
    assert [f"removing checkpoint step-{e['step']}" in result.stderr for e in removed] == [True] * len(removed)


def test_a_notice_counts_the_removals_its_save_would_first_make_room_with(tmp_path):
    """On a disk that holds two checkpoints, a save after two must first remove one: the checkpointer says
    so before the save (the notice's rule adds the removal to the save's time), and times the removal."""
    import torch

    from runner.checkpoint import Checkpointer
    seen: list[tuple[str, dict]] = []
    with small_disk(tmp_path / "disk", "3m") as disk:
        checkpointer = Checkpointer(disk, keep=3, async_mode=False, rank=0, warn=lambda message: None,
                                    on_event=lambda name, **fields: seen.append((name, fields)), remove_ahead=False)
        checkpointer.agree_on_step()
        state = {"model": {"w": torch.zeros(280_000)}, "progress": {"step": 1}}   # 1.12 MB a checkpoint
        checkpointer.save(10, state)
        assert checkpointer.removals_before_next_save() == 0
        checkpointer.save(20, state)
        assert checkpointer.removals_before_next_save() == 1
        checkpointer.save(30, state)
        checkpointer.close()
    removed = [fields for name, fields in seen if name == "checkpoint_removed"]
    assert [f["step"] for f in removed] == [10] and removed[0]["reason"] == "room for checkpoint step-30"
    assert checkpointer.measured_s["remove"] == removed[0]["duration_s"] > 0


def test_room_for_the_next_save_is_made_ahead_once_a_save_has_landed(tmp_path):
    """The same disk, removals ahead (the default): once the second checkpoint has landed, the first is
    renamed out of the checkpoints at once and deleted on a thread, so that the third save removes nothing
    (deleting 30.8 GB took 6-10 s inside the save on the H200 hosts); until that thread is done, the notice's
    rule counts the removal under way."""
    import torch

    from runner.checkpoint import Checkpointer
    seen: list[tuple[str, dict]] = []
    with small_disk(tmp_path / "disk", "3m") as disk:
        checkpointer = Checkpointer(disk, keep=3, async_mode=False, rank=0, warn=lambda message: None,
                                    on_event=lambda name, **fields: seen.append((name, fields)))
        checkpointer.agree_on_step()
        state = {"model": {"w": torch.zeros(280_000)}, "progress": {"step": 1}}   # 1.12 MB a checkpoint
        checkpointer.save(10, state)
        assert not [name for name, _ in seen if name == "checkpoint_removed"]   # room enough: nothing goes
        checkpointer.save(20, state)
        assert checkpointer.steps() == [20]   # step-10 is out of the checkpoints as soon as step-20 landed
        assert checkpointer.removals_before_next_save() in (0, 1)   # 1 while its files are still deleted
        checkpointer.wait_removals()
        assert checkpointer.removals_before_next_save() == 0
        assert not list(disk.glob(".step-*"))
        before = len(seen)
        checkpointer.save(30, state)
        at_the_save = [f for name, f in seen[before:] if name == "checkpoint_removed"]
        checkpointer.close()
        left = checkpointer.steps()
    removed = [fields for name, fields in seen if name == "checkpoint_removed"]
    assert removed[0]["step"] == 10 and removed[0]["reason"] == "room for the next checkpoint, made ahead"
    assert all(f["reason"].endswith("made ahead") for f in at_the_save)   # none made inside save(30)
    assert left[0] == 30 and 20 not in left   # and step-20 went ahead once step-30 landed


def test_a_start_removes_what_an_earlier_life_left_half_removed(tmp_path):
    import torch

    from runner.checkpoint import Checkpointer
    from runner.layout import removing_folder
    first = Checkpointer(tmp_path, keep=3, async_mode=False, rank=0, warn=lambda m: None, on_event=lambda n, **f: None)
    first.agree_on_step()
    first.save(10, {"model": {"w": torch.zeros(1000)}, "progress": {"step": 10}})
    first.close()
    half = removing_folder(tmp_path, 5)
    half.mkdir()
    (half / "__0_0.distcp").write_bytes(b"x" * 100)
    for ahead in (True, False):
        seen: list[tuple[str, dict]] = []
        later = Checkpointer(tmp_path, keep=3, async_mode=False, rank=0, warn=lambda m: None,
                             on_event=lambda name, **fields: seen.append((name, fields)), remove_ahead=ahead)
        assert later.agree_on_step() == 10 and half.exists()   # the start does not wait for its deletion
        if ahead:   # deleted on a thread with the removals ahead (once the first step is done) ...
            later.make_room_ahead()
            later.wait_removals()
        else:   # ... or first thing at the next save
            later.save(20, {"model": {"w": torch.zeros(1000)}, "progress": {"step": 20}})
        assert not half.exists() and 10 in later.steps()
        later.close()
        assert [(f["step"], f["reason"]) for name, f in seen if name == "checkpoint_removed"] == [
            (5, "left half removed by an earlier life")]
        half.mkdir()
        (half / "__0_0.distcp").write_bytes(b"x" * 100)


def test_a_resume_reads_its_checkpoints_metadata_once_unless_the_file_changed(tmp_path, monkeypatch):
    """A resume asks the checkpoint's DCP metadata whether it holds each entry (its random state, a workload's
    own state) and then loads it: one unpickling of the metadata file for all of it (an SDXL checkpoint's is 2.5
    MB, about a quarter of a second each), and the load still puts the saved values in place. A metadata file
    replaced since is read again."""
    import torch

    from runner import checkpoint_reader
    from runner.checkpoint import Checkpointer
    reads = []

    class Counting(checkpoint_reader._MetadataUnpickler):
        def load(self):
            reads.append(1)
            return super().load()

    first = Checkpointer(tmp_path, keep=3, async_mode=False, rank=0, warn=lambda m: None, on_event=lambda n, **f: None)
    first.agree_on_step()
    first.save(10, {"model": {"w": torch.arange(1000.0)}, "progress": {"step": 10}})
    first.close()
    monkeypatch.setattr(checkpoint_reader, "_MetadataUnpickler", Counting)
    later = Checkpointer(tmp_path, keep=3, async_mode=False, rank=0, warn=lambda m: None, on_event=lambda n, **f: None)
    assert later.agree_on_step() == 10
    assert later.has_entry(10, "model") and not later.has_entry(10, "ema") and later.has_entry(10, "progress")
    state = {"model": {"w": torch.zeros(1000)}, "progress": {"step": 0}}
    later.load(10, state)
    assert torch.equal(state["model"]["w"], torch.arange(1000.0)) and state["progress"]["step"] == 10
    assert len(reads) == 1
    metadata = later.folder(10) / ".metadata"
    data = metadata.read_bytes()
    metadata.unlink()
    metadata.write_bytes(data)   # another file now (a checkpoint written again under the same step)
    assert later.has_entry(10, "model") and len(reads) == 2
    later.close()


def test_a_start_counts_what_an_earlier_life_left_half_removed_as_room(tmp_path):
    """A life that left on a notice while a checkpoint was being removed ahead leaves `.step-N.removing`: on a
    3 MB disk with the newest checkpoint (1.16 MB) and such a leftover (1.3 MB), the free space alone is less than
    a checkpoint, but the start removes the leftover (on a thread, before any save needs the room): the run is
    not refused, and ends with its final checkpoint."""
    plan = plan_with(tmp_path, bytes_=1.16e6, keep=2)
    with small_disk(tmp_path / "disk", "3m") as disk:
        first = execute(plan, tmp_path / "run", "--steps", "20", "--checkpoint-dir", str(disk / "ckpt"))
        assert first.returncode == 0, first.stderr[-3000:]
        leftover = disk / "ckpt" / ".step-5.removing"
        leftover.mkdir()
        (leftover / "__0_0.distcp").write_bytes(b"\0" * 1_300_000)
        assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize < 1.16e6
        result = execute(plan, tmp_path / "run", "--steps", "40", "--checkpoint-dir", str(disk / "ckpt"))
        assert result.returncode == 0, result.stderr[-3000:]
        assert not leftover.exists()
    assert summary(tmp_path / "run")["steps"] == 40
    removed = events(tmp_path / "run", "checkpoint_removed")
    assert [(e["step"], e["reason"]) for e in removed] == [(5, "left half removed by an earlier life")]


def test_a_disk_that_fills_in_the_middle_of_a_save_stops_the_job_for_good_in_one_line(tmp_path):
    """The plan says 1.0 MB a checkpoint, the disk has 1.1 MB: the first save starts, runs out of space,
    leaves nothing behind, and the job stops with one line naming the disk (no restart, exit 1)."""
    plan = plan_with(tmp_path, bytes_=1.0e6, keep=2)
    with small_disk(tmp_path / "disk", "1100k") as disk:
        result = execute(plan, tmp_path / "run", "--steps", "60", "--checkpoint-dir", str(disk / "ckpt"))
        leftovers = [p.name for p in (disk / "ckpt").iterdir() if p.name.startswith((".step-", "step-"))]
    assert result.returncode == 1, result.stderr[-3000:]
    stops = [x for x in result.stderr.splitlines() if x.startswith("runner: not restarting")]
    assert len(stops) == 1 and "not enough disk" in stops[0] and str(disk / "ckpt") in stops[0], result.stderr
    assert "no checkpoint is complete yet" in stops[0]
    assert "Traceback" not in result.stderr and "No space left" not in result.stderr, result.stderr
    assert leftovers == []
    s = summary(tmp_path / "run")
    assert s["status"] == "failed" and s["reason"] == "disk" and s["restarts"] == 0
    assert not events(tmp_path / "run", "checkpoint_save")


def test_telemetry_on_a_full_disk_drops_lines_and_never_stops_training(tmp_path):
    """The telemetry writer on a disk that fills: the writes that fail are counted and said once, a line
    cut by a short write is ended, and once there is room again whole lines follow (the reader passes a
    damaged line over)."""
    from costsim.contract.telemetry import read_events
    from runner.telemetry import Telemetry
    with small_disk(tmp_path / "disk", "64k") as disk:
        telemetry = Telemetry(disk / "run", "r", 0, 1)
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)   # fill the disk
        try:
            while os.write(fd, b"x" * 1024):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        for step in range(50):
            telemetry.event("step", step=step, step_time_s=0.01, samples=64)   # no exception
        assert telemetry.dropped_lines > 0
        filler.unlink()
        telemetry.event("end", step=50, samples=3200)
        telemetry.close()
        events = read_events(disk / "run")
    assert events[-1]["event"] == "end" and len(events.damaged) <= 1
