"""`runner prepare-sdxl`: a folder of captioned images -> the latent dataset the sdxl-unet workload trains on.

Captions come from a `metadata.jsonl` in the image folder (the diffusers/datasets "imagefolder"
convention: one `{"file_name": ..., "text": ...}` per line) or, without one, from a `.txt` file
beside each image. Each image is resized (shorter side to the resolution) and centre-cropped to a
square, as the diffusers SDXL training script does; its latents come from the SDXL VAE (a sample of
the latent distribution, seeded, times the VAE's scaling factor), its text embeddings from both text
encoders (penultimate hidden states, concatenated) and the second encoder's pooled projection, and
its time ids are (original height, width, crop top, left, target height, width).

Everything comes from local folders (a diffusers SDXL pipeline folder: vae/, text_encoder/,
text_encoder_2/, tokenizer/, tokenizer_2/); nothing is downloaded. Shards are written one at a time,
atomically, with the settings recorded in `prepare.json`: a run that stops goes on from the first
missing shard when started again, and a folder made with other settings is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
SETTINGS = "prepare.json"
PARTS = ("vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")


class PrepareError(ValueError):
    """Bad input to prepare-sdxl: `where` names the file or folder, `field` what is wrong in it."""

    def __init__(self, where: str, field: str, message: str):
        super().__init__(message)
        self.where, self.field = where, field


@dataclass(frozen=True)
class Settings:
    images: int
    captions_sha256: str     # the image list and every caption: another image set is another dataset
    resolution: int
    shard_size: int
    dtype: str
    seed: int
    model: str
    vae: str


def captioned_images(folder: Path, caption_column: str = "text") -> list[tuple[Path, str]]:
    """(image, caption) pairs in file-name order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PrepareError(str(folder), "images", "no such folder")
    metadata = folder / "metadata.jsonl"
    if metadata.is_file():
        pairs = []
        for number, line in enumerate(metadata.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PrepareError(str(metadata), f"line {number}", f"not JSON ({exc.msg})") from None
            if not isinstance(record, dict) or "file_name" not in record or caption_column not in record:
                raise PrepareError(str(metadata), f"line {number}",
                                   f"expected an object with file_name and {caption_column!r}")
            image = folder / str(record["file_name"])
            if not image.is_file():
                raise PrepareError(str(metadata), f"line {number}", f"no image {record['file_name']!r} in {folder}")
            pairs.append((image, str(record[caption_column])))
        pairs.sort(key=lambda pair: str(pair[0]))
    else:
        images = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        pairs = []
        for image in images:
            caption = image.with_suffix(".txt")
            if not caption.is_file():
                raise PrepareError(str(image), "caption", f"no {caption.name} beside it and no metadata.jsonl in "
                                   f"{folder} (each image needs a caption)")
            pairs.append((image, caption.read_text().strip()))
    if not pairs:
        raise PrepareError(str(folder), "images", f"no images ({', '.join(IMAGE_SUFFIXES)}) in it")
    return pairs


def load_image(path: Path, resolution: int):
    """The image as a (3, R, R) tensor in [-1, 1] and its SDXL time ids (original size, crop, target)."""
    import numpy as np
    import torch
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as opened:
            image = opened.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise PrepareError(str(path), "image", f"cannot be read as an image ({exc})") from None
    width, height = image.size
    scale = resolution / min(width, height)
    resized = image.resize((max(resolution, round(width * scale)), max(resolution, round(height * scale))),
                           Image.Resampling.BILINEAR)
    left, top = (resized.width - resolution) // 2, (resized.height - resolution) // 2
    cropped = resized.crop((left, top, left + resolution, top + resolution))
    pixels = torch.from_numpy(np.asarray(cropped, dtype=np.float32) / 127.5 - 1.0).permute(2, 0, 1)
    return pixels, [height, width, top, left, resolution, resolution]


def settings_for(pairs, *, resolution: int, shard_size: int, dtype: str, seed: int, model: Path,
                 vae: Path) -> Settings:
    digest = hashlib.sha256()
    for image, caption in pairs:
        digest.update(f"{image.name}\0{caption}\0".encode())
    return Settings(images=len(pairs), captions_sha256=digest.hexdigest(), resolution=resolution,
                    shard_size=shard_size, dtype=dtype, seed=seed, model=str(model.resolve()), vae=str(vae.resolve()))


def check_out(out: Path, settings: Settings) -> None:
    """Record the settings in a new folder; in an earlier one, refuse other settings."""
    from costsim.contract.jsonfiles import write_atomic

    out.mkdir(parents=True, exist_ok=True)
    recorded = out / SETTINGS
    if recorded.is_file():
        before = json.loads(recorded.read_text())
        changed = [k for k, v in asdict(settings).items() if before.get(k) != v]
        if changed:
            raise PrepareError(str(recorded), changed[0], f"this folder was prepared with {changed[0]}="
                               f"{before.get(changed[0])!r}, now {getattr(settings, changed[0])!r}: use another --out")
        return
    write_atomic(recorded, json.dumps(asdict(settings), indent=2) + "\n")


def check_model(model: Path, vae: Path | None) -> None:
    for part in PARTS:
        folder = (vae if part == "vae" and vae is not None else model / part)
        if not folder.is_dir():
            raise PrepareError(str(folder), part, "no such folder: --model is a local diffusers SDXL pipeline folder "
                               f"({', '.join(PARTS)}); nothing is downloaded")


class Encoders:
    """The VAE and both text encoders, on one device, in fp32 (SDXL's VAE overflows in fp16)."""

    def __init__(self, model: Path, vae: Path | None, device):
        import torch
        from diffusers import AutoencoderKL
        from transformers import AutoTokenizer, CLIPTextModel, CLIPTextModelWithProjection

        self.device = device   # local_files_only everywhere: nothing is downloaded
        self.vae = AutoencoderKL.from_pretrained(vae or model / "vae", torch_dtype=torch.float32,
                                                 local_files_only=True).to(device)
        self.tokenizers = [AutoTokenizer.from_pretrained(model / name, local_files_only=True)
                           for name in ("tokenizer", "tokenizer_2")]
        self.text = CLIPTextModel.from_pretrained(model / "text_encoder", torch_dtype=torch.float32,
                                                  local_files_only=True).to(device)
        self.text_2 = CLIPTextModelWithProjection.from_pretrained(model / "text_encoder_2", torch_dtype=torch.float32,
                                                                  local_files_only=True).to(device)
        for module in (self.vae, self.text, self.text_2):
            module.eval().requires_grad_(False)

    def encode(self, pixels, captions: list[str], generator) -> dict:
        import torch

        with torch.no_grad():
            latents = self.vae.encode(pixels.to(self.device)).latent_dist.sample(generator=generator)
            hidden = []
            for tokenizer, encoder in zip(self.tokenizers, (self.text, self.text_2)):
                ids = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                                return_tensors="pt").input_ids.to(self.device)
                output = encoder(ids, output_hidden_states=True)
                hidden.append(output.hidden_states[-2])
            return {"latents": latents * self.vae.config.scaling_factor, "text": torch.cat(hidden, dim=-1),
                    "pooled": output.text_embeds}


def prepare(images: Path, model: Path, out: Path, *, vae: Path | None = None, resolution: int = 1024, batch: int = 8,
            shard_size: int = 256, dtype: str = "bf16", seed: int = 0, device: str = "auto",
            caption_column: str = "text", log=None) -> list[Path]:
    """Write the shards that are missing; returns every shard's path."""
    import torch
    from safetensors.torch import save_file

    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if resolution % 8:
        raise PrepareError("--resolution", "resolution", f"{resolution} is not a multiple of 8 (the VAE's factor)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PrepareError("--device", "device", f"{device}: no GPU here (auto takes one when there is one)")
    pairs = captioned_images(images, caption_column)
    check_model(model, vae)
    out = Path(out)
    check_out(out, settings_for(pairs, resolution=resolution, shard_size=shard_size, dtype=dtype, seed=seed,
                                model=model, vae=vae or model / "vae"))
    shards = math.ceil(len(pairs) / shard_size)
    paths = [out / f"shard-{k:05d}.safetensors" for k in range(shards)]
    missing = [k for k, path in enumerate(paths) if not path.is_file()]
    log(f"prepare-sdxl: {len(pairs)} images -> {shards} shard(s) of up to {shard_size} in {out}; "
        f"{shards - len(missing)} already written")
    if not missing:
        return paths
    on = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    try:
        encoders = Encoders(model, vae, on)
    except (OSError, ValueError) as exc:   # a part's files missing or not what its class expects
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PrepareError(str(model), "model", f"cannot load the VAE, tokenizers and text encoders: {first}") from None
    store = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    started, done, total = time.monotonic(), 0, sum(len(pairs[k * shard_size:(k + 1) * shard_size]) for k in missing)
    last_line = started
    for k in missing:
        members = pairs[k * shard_size:(k + 1) * shard_size]
        generator = torch.Generator(on).manual_seed(seed * 1_000_003 + k)   # the shard's latents: reproducible
        parts: dict[str, list] = {"latents": [], "text": [], "pooled": [], "time_ids": []}
        for start in range(0, len(members), batch):
            chunk = members[start:start + batch]
            loaded = [load_image(image, resolution) for image, _ in chunk]
            encoded = encoders.encode(torch.stack([p for p, _ in loaded]), [c for _, c in chunk], generator)
            for name, value in encoded.items():
                parts[name].append(value.to("cpu", store))
            parts["time_ids"].append(torch.tensor([t for _, t in loaded], dtype=store))
            done += len(chunk)
            now = time.monotonic()
            if now - last_line >= 10.0:
                rate = done / (now - started)
                log(f"prepare-sdxl: {done}/{total} images, {rate:.1f} images/s, ETA {(total - done) / rate:.0f} s")
                last_line = now
        tensors = {name: torch.cat(values).contiguous() for name, values in parts.items()}
        tmp = paths[k].with_name(f".{paths[k].name}.tmp")
        save_file(tensors, str(tmp), metadata={"source": "runner prepare-sdxl", "first_image": members[0][0].name})
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, paths[k])
        log(f"prepare-sdxl: wrote {paths[k].name} ({len(members)} samples; {done}/{total} images)")
    return paths
