"""The fine-tune's pure parts: the dataset order, reading ahead, the batch split's next range, captions
and the LR schedule (no training here)."""

from __future__ import annotations

import json

import pytest

from runner.batching import split_batch

torch = pytest.importorskip("torch")


def test_following_is_the_range_a_rank_asks_for_next_at_any_split():
    for global_batch, world, micro in [(64, 2, 16), (12, 3, 2), (8, 1, 8), (6, 2, 1), (64, 8, 4)]:
        split = split_batch(global_batch, world, micro)
        for rank in range(world):
            asked = [split.indices(step, rank, m) for step in range(4) for m in range(split.accumulation)]
            assert [split.following(r, rank) for r in asked[:-1]] == asked[1:]


def test_the_order_is_a_seeded_permutation_per_epoch_and_a_function_of_the_index_alone():
    from runner.workloads.latents import Order
    order = Order(20, seed=3, held_out=4)
    assert len(order.validation) == 4 and not set(order.validation) & set(order.training.tolist())
    assert Order(20, seed=9, held_out=4).validation == order.validation   # the held-out slice: the data's, not the run's
    epochs = [order.rows(range(e * 16, (e + 1) * 16)) for e in range(3)]
    assert all(sorted(rows) == sorted(order.training.tolist()) for rows in epochs)   # each epoch: every row once
    assert epochs[0] != epochs[1]
    # asked in another order, in other pieces, by a fresh object (a resume at another world size): the same rows
    sequential = [row for rows in epochs for row in rows]
    again = Order(20, seed=3, held_out=4)
    for start in (40, 0, 35, 13, 20):
        assert again.rows(range(start, start + 5)) == sequential[start:start + 5]
    assert Order(20, seed=4, held_out=4).rows(range(16)) != epochs[0]


def test_read_ahead_returns_what_a_direct_read_returns_even_when_its_guess_is_wrong():
    from runner.workloads.latents import Prefetcher
    calls = []

    def load(indices):
        calls.append(indices)
        return list(indices)

    prefetcher = Prefetcher(load, lambda r: range(r.stop, r.stop + len(r)), depth=2)
    try:
        assert prefetcher.get(range(0, 4)) == [0, 1, 2, 3]
        assert prefetcher.get(range(4, 8)) == [4, 5, 6, 7]          # read ahead
        assert prefetcher.get(range(100, 104)) == list(range(100, 104))   # not foreseen: read at once
    finally:
        prefetcher.close()
    assert calls.count(range(4, 8)) == 1


def test_captions_come_from_metadata_jsonl_or_a_txt_beside_each_image(tmp_path):
    from runner.prepare_sdxl import PrepareError, captioned_images
    from tests.sdxl_tiny import save_images
    beside = captioned_images(save_images(tmp_path / "a", 3))
    listed = captioned_images(save_images(tmp_path / "b", 3, metadata=True))
    assert [c for _, c in beside] == [c for _, c in listed] and beside[0][1].startswith("a pattern number 0")
    (tmp_path / "a" / "img-001.txt").unlink()
    with pytest.raises(PrepareError, match="no img-001.txt beside it"):
        captioned_images(tmp_path / "a")
    (tmp_path / "b" / "metadata.jsonl").write_text(json.dumps({"file_name": "gone.png", "text": "x"}) + "\n")
    with pytest.raises(PrepareError, match="no image 'gone.png'"):
        captioned_images(tmp_path / "b")


def test_the_lr_warms_up_linearly_then_follows_the_cosine_to_zero():
    from runner.workloads.sdxl import lr_schedule
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = lr_schedule(optimizer, warmup_steps=4, schedule="cosine", total_steps=14)
    seen = []
    for _ in range(14):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert seen[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert seen[4] == pytest.approx(1.0) and seen[9] == pytest.approx(0.5)   # halfway through the 10 decay steps
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_a_shards_header_is_checked_without_reading_its_tensors_and_a_torn_one_is_named(tmp_path):
    """runner.workloads.latents.shard_rows reads the safetensors headers alone (runner execute's check, without
    torch); what safetensors itself would refuse (a header that is not JSON, data cut short) is one DatasetError
    naming the shard, and an intact folder gives each shard's rows as the tensors have them."""
    from safetensors.torch import save_file

    from runner.workloads.latents import DatasetError, LatentShards, shard_rows
    shapes = {"latents": (4, 8, 8), "text": (77, 16), "pooled": (12,), "time_ids": (6,)}
    folder = tmp_path / "data"
    folder.mkdir()
    for k, n in enumerate((3, 5)):
        save_file({"latents": torch.zeros(n, 4, 8, 8, dtype=torch.bfloat16), "text": torch.zeros(n, 77, 16),
                   "pooled": torch.zeros(n, 12), "time_ids": torch.zeros(n, 6)}, str(folder / f"s{k}.safetensors"))
    assert [(p.name, rows) for p, rows in shard_rows(folder, shapes)] == [("s0.safetensors", 3), ("s1.safetensors", 5)]
    assert len(LatentShards(folder, shapes)) == 8   # the reader agrees
    whole = (folder / "s1.safetensors").read_bytes()
    for name, damaged in (("cut", whole[:-100]), ("short", whole[:5]), ("noise", b"\x10" + b"\x00" * 7 + b"{not json")):
        bad = tmp_path / name
        bad.mkdir()
        (bad / "s.safetensors").write_bytes(damaged)
        with pytest.raises(DatasetError, match=r"shard s.safetensors: not a readable safetensors file"):
            shard_rows(bad, shapes)
    with pytest.raises(DatasetError, match=r"tensor 'pooled' has shape \(3, 12\); the model needs \(N, 13\)"):
        shard_rows(folder, {**shapes, "pooled": (13,)})
