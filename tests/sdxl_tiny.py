"""Tiny SDXL parts built from configs with random weights and saved to a folder, as a user's local
pipeline folder would be: nothing is downloaded. Sized to tests/data/tiny_unet_config.json: 128 px
images -> 16 x 16 latents, text 32 + 32 = 64 (its cross_attention_dim), pooled 32 (80 - 6 x 8)."""

from __future__ import annotations

import json
from pathlib import Path

TINY_UNET = Path(__file__).resolve().parent / "data" / "tiny_unet_config.json"
RESOLUTION = 128


def sdxl_plan(tmp_path: Path, runtime: dict | None = None) -> Path:
    """The planner's tiny plan made an sdxl-unet one: global batch 4, bf16, checkpoints every 4 steps,
    and `runtime` settings if given (as a measured profile would set them)."""
    from tests.runner_helpers import tiny_plan
    plan = tiny_plan(tmp_path, interval_steps=4)
    doc = json.loads(plan.read_text())
    doc["workload"].update(model="sdxl-unet", global_batch=4, precision="bf16")
    if runtime is not None:
        doc["runtime"] = runtime
    plan.write_text(json.dumps(doc))
    return plan


def byte_level_vocab() -> dict[str, int]:
    """CLIP's byte-to-unicode alphabet, each symbol alone and word-final, and the two special tokens:
    a BPE vocabulary with no merges (every character its own token)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, extra = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    symbols = [chr(c) for c in cs]
    tokens = symbols + [s + "</w>" for s in symbols] + ["<|startoftext|>", "<|endoftext|>"]
    return {token: i for i, token in enumerate(tokens)}


def save_tiny_pipeline(folder: Path, seed: int = 0) -> Path:
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                  up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 8, 8, 8), latent_channels=4,
                  norm_num_groups=8, layers_per_block=1, sample_size=RESOLUTION).save_pretrained(folder / "vae")
    vocab = byte_level_vocab()
    config = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=77, projection_dim=32,
                  bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"],
                  pad_token_id=vocab["<|endoftext|>"])
    CLIPTextModel(CLIPTextConfig(**config)).save_pretrained(folder / "text_encoder")
    CLIPTextModelWithProjection(CLIPTextConfig(**config)).save_pretrained(folder / "text_encoder_2")
    (folder / "vocab").mkdir(exist_ok=True)
    (folder / "vocab" / "vocab.json").write_text(json.dumps(vocab))
    (folder / "vocab" / "merges.txt").write_text("#version: 0.2\n")
    for name in ("tokenizer", "tokenizer_2"):
        CLIPTokenizer(str(folder / "vocab" / "vocab.json"), str(folder / "vocab" / "merges.txt"),
                      model_max_length=77).save_pretrained(folder / name)
    UNet2DConditionModel.from_config(json.loads(TINY_UNET.read_text())).save_pretrained(folder / "unet")
    return folder


def save_images(folder: Path, count: int, *, metadata: bool = False, seed: int = 0) -> Path:
    """`count` small images of smooth colour patterns with captions (.txt beside each, or metadata.jsonl)."""
    import numpy as np
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        h, w = int(rng.integers(96, 200)), int(rng.integers(96, 200))   # other sizes: resized and cropped
        y, x = np.mgrid[0:h, 0:w]
        colour = rng.uniform(0, 255, size=3)
        pixels = (colour * (0.5 + 0.5 * np.sin(x[..., None] / (5 + i) + y[..., None] / 7))).astype(np.uint8)
        name = f"img-{i:03d}.png"
        Image.fromarray(pixels).save(folder / name)
        caption = f"a pattern number {i} in colour {int(colour[0])}"
        if metadata:
            records.append(json.dumps({"file_name": name, "text": caption}))
        else:
            (folder / name).with_suffix(".txt").write_text(caption + "\n")
    if metadata:
        (folder / "metadata.jsonl").write_text("\n".join(records) + "\n")
    return folder
