"""The runner command line: `runner execute plan.json` on every node of the plan."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from costsim.cliparams import DURATION, OUTPUT, OUTPUT_FOLDER, PLOT, SEED
from costsim.contract.timing import WARMUP_STEPS
from costsim.entry import run
from costsim.errors import InputError
from costsim.runtime import parse_pairs
from runner.store import S3Store


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="costsim")
def cli():
    """Run costsim plans as checkpointed PyTorch DDP jobs that survive preemption.

    Example: runner execute plan.json --run-dir runs/demo
    """


@cli.command("execute")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--run-dir", type=click.Path(file_okay=False), help="default: runs/<run id>; on several nodes, "
              "a folder every node sees (shared storage)")
@click.option("--run-id", help="the job's id, the same on every node (default: SkyPilot/Slurm job id, else the "
              "run folder's name on several nodes, else a new one)")
@click.option("--nnodes", type=click.IntRange(min=1), help="nodes in the job (else from SkyPilot/Slurm/env)")
@click.option("--node-rank", type=click.IntRange(min=0), help="this node's rank")
@click.option("--rdzv-endpoint", help="HOST:PORT of the rendezvous (node 0)")
@click.option("--nproc-per-node", type=click.IntRange(min=1), help="default: the plan's GPUs per node, or all of "
              "this node's GPUs if it has fewer; the plan's global batch is kept (accumulation)")
@click.option("--min-nodes", type=click.IntRange(min=1), help="elastic: go on with as few nodes (default: the "
              "plan's resources.min_nodes, else a fixed gang); the global batch is kept by accumulation")
@click.option("--inject-preemptions", "inject", help="drill: N random kills, or a schedule like kill@30,term@60")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="seeds the model, the data and the drill schedule (same seed, same training)")
@click.option("--max-restarts", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--rdzv-timeout", type=DURATION, default="60s", show_default=True,
              help="how long a node other than 0 waits for the rendezvous to answer")
@click.option("--steps", type=click.IntRange(min=1), help="stop after this many steps (drills, profiling)")
@click.option("--workload-entry", help="module:function building your own workload (see docs/runner-workloads.md)")
@click.option("--option", "options", multiple=True, help="KEY=VALUE passed to the workload (repeatable), e.g. "
              "weights=DIR data=DIR ema=0.9999 for an SDXL fine-tune (docs/sdxl-finetune.md)")
@click.option("--runtime", "runtime", multiple=True, help="KEY=VALUE over the plan's runner settings, e.g. "
              "compile=blocks, channels_last=true, sdpa=cudnn (repeatable; see docs/runner-speed.md)")
@click.option("--market", help="the market this node was bought on, when not the plan's resources.market (a fallback; "
              "`costsim control` sets it): one the plan prices")
@click.option("--checkpoint-dir", help="where checkpoints live: a folder (local, or shared storage every node sees) or "
              "s3://bucket/prefix on any S3-compatible store (endpoint and credentials from AWS_ENDPOINT_URL, "
              "AWS_ACCESS_KEY_ID... or AWS_PROFILE); default: the plan's checkpoint.location, else RUN/checkpoints")
@click.option("--notice-save", type=click.Choice(["auto", "always"]), help="at a spot notice: auto saves only when the "
              "training since the newest checkpoint is worth more than the save and the save lands within the notice "
              "(the rule the planner prices); always saves at every notice (default: the plan's checkpoint.notice_save)")
@click.option("--share-compile-cache", is_flag=True, help="with an s3:// --checkpoint-dir: keep torch.compile's caches "
              "in the store too, so that a new node starts from them instead of compiling (20-40 s for SDXL); the "
              "caches are code the workers run: only for a prefix no one but this job's runners can write")
@click.option("--accept-plan-change", is_flag=True, help="go on in a run folder whose job this plan changes (workload, "
              "batch, seed, options): the earlier plan is kept in RUN/superseded-plans/ and the change recorded")
@click.option("--check", "check_only", is_flag=True, help="check the plan, options, GPUs and run folder as for a run, "
              "then exit without starting anything (0: it would run)")
def execute_command(plan, run_dir, run_id, nnodes, node_rank, rdzv_endpoint, nproc_per_node, min_nodes, inject, seed,
                    max_restarts, rdzv_timeout, steps, workload_entry, options, runtime, market, checkpoint_dir,
                    notice_save, share_compile_cache, accept_plan_change, check_only):
    """Run a plan: torchrun workers, checkpoints, restarts; telemetry and summary in the run folder.

    Example: runner execute plan.json --inject-preemptions 3 --seed 1
    """
    from costsim.contract.job import Finished, check_binding
    from costsim.contract.plan import Plan
    from runner import compile_share, environment, faults
    from runner.launch import LaunchError, discover, wait_for_rendezvous
    from runner.lease import Lease, StoreLease
    from runner.plan import effective_plan, load_run_spec, run_spec
    from runner.store import StoreError, StoreUnavailable, record_job
    from runner.supervisor import Execution, Supervisor, default_run_id, prepare_run_dir
    from runner.workloads import UnknownWorkload, WorkloadOptionError, check_options, resolve
    environment.check()   # COSTSIM_S3_FETCH_THREADS, COSTSIM_WORKER_START and the like
    try:
        given = Plan.read(plan)
        spec = run_spec(given, plan, with_run=False)   # a plan's own `run` section is never taken
        for option in options:
            if "=" not in option:
                raise click.BadParameter(f"{option!r}: expected KEY=VALUE", param_hint="--option")
        # the plan's workload options (priced with: ema), then the command line's over them
        chosen = {**given.workload.options, **dict(o.split("=", 1) for o in options)}
        try:
            check_options(resolve(spec.model, workload_entry), workload_entry or spec.model, chosen)
        except WorkloadOptionError as exc:
            raise InputError("--option", "option", str(exc)) from None
        node = discover(nnodes=nnodes, node_rank=node_rank, endpoint=rdzv_endpoint, env=os.environ)
        if node.endpoint and node.node_rank > 0:   # before anything is created or started
            wait_for_rendezvous(node.endpoint, rdzv_timeout)
        nproc = nproc_per_node or _nproc(spec)
        if node.nnodes > 1 and not (run_id or node.run_id or run_dir):
            raise click.UsageError("on several nodes give --run-dir (a shared folder) or --run-id, the same on "
                                   "every node, so that they join one rendezvous")
        run_id = run_id or node.run_id or (Path(run_dir).name if node.nnodes > 1 else None) or default_run_id()
        folder = Path(run_dir or Path("runs") / run_id)
        total = steps or spec.total_steps
        try:
            schedule = faults.parse_schedule(inject, total_steps=total, seed=seed) if inject else []
        except ValueError as exc:
            raise InputError("--inject-preemptions", "inject-preemptions", str(exc)) from None
        settings = parse_pairs(runtime, base=spec.runtime)
        smallest = min_nodes or spec.min_nodes or node.nnodes
        if min_nodes and min_nodes > node.nnodes:
            raise click.BadParameter(f"{min_nodes} > --nnodes {node.nnodes}", param_hint="--min-nodes")
        # Every node count the job may run on (elastic: min..max) must split the global batch.
        split = spec.check_split(nproc, range(smallest, node.nnodes + 1))[node.nnodes]
        if market is not None:
            given = given.with_market(_market(plan, given, market))
        effective = effective_plan(given, runtime=settings, steps=steps, options=chosen, workload_entry=workload_entry,
                                   seed=seed, checkpoint_location=checkpoint_dir, notice_save=notice_save)
        changes = check_binding(folder, effective, accept_change=accept_plan_change)
        store = check_checkpoint_place(folder, effective, accept_change=accept_plan_change)
        if share_compile_cache:
            if store is None:
                raise InputError("--share-compile-cache", "share-compile-cache", "needs an object store to share "
                                 "through: give --checkpoint-dir s3://BUCKET/PREFIX (a shared folder shares "
                                 "RUN/compile-cache as it is)")
            os.environ[compile_share.ENV] = "1"   # the workers' environment (runner.compile_share)
        if check_only:
            click.echo(f"runner: {plan} would run in {folder}: {spec.workload} ({spec.model}), {total} steps on "
                       f"{node.nnodes} node(s) x {nproc} process(es)", err=True)
            return
        leases: list = []
        try:
            if node.node_rank == 0:   # one runner per run folder and per store prefix: node 0 holds them for all
                say = lambda line: click.echo(line, err=True)   # noqa: E731
                held: list = [Lease(folder, run_id, say=say)] + ([StoreLease(store.store, run_id, say=say)]
                                                                 if store is not None else [])
                for lease in held:   # each is given back below only once it is held
                    try:
                        lease.acquire()
                    except StoreUnavailable as exc:   # the store dropped out (said above): taken when it answers
                        say(f"runner: warning: {exc}: the prefix's lease is taken when the store answers")
                        lease.pending = True
                    leases.append(lease)
                if store is not None and store.record and not leases[-1].pending:   # once its lease is ours
                    record_job(store.store, effective, run_id)
            written = prepare_run_dir(folder, effective, changes=tuple(changes), run_id=run_id)
            spec = load_run_spec(written)   # what the workers will read
            if store is not None and node.node_rank == 0:
                fetch_lives(store.store, folder)
        except BaseException:
            for lease in reversed(leases):
                lease.release()
            raise
    except Finished as done:
        click.echo(f"runner: {done}", err=True)
        return
    except UnknownWorkload as exc:
        raise InputError(plan, "workload.model", str(exc)) from None
    except LaunchError as exc:
        raise InputError("node", "rendezvous", str(exc)) from None
    except PermissionError as exc:
        raise InputError("--run-dir", "run-dir", str(exc)) from None
    except StoreError as exc:   # the prefix's lease or job record could not be read or written
        raise InputError("--checkpoint-dir", "checkpoint-dir", str(exc)) from None
    click.echo(f"runner: {spec.workload} ({spec.model}) on {node.nnodes} node(s) x {nproc} process(es) "
               f"[{node.source}], {total} steps of {spec.global_batch} samples (per GPU: micro-batch {split.micro_batch} "
               f"x accumulation {split.accumulation}), {settings.describe()}; run folder {folder}", err=True)
    execution = Execution(spec=spec, node=node, run_dir=folder, run_id=run_id, nproc_per_node=nproc,
                          schedule=schedule, max_restarts=max_restarts, min_nodes=min_nodes or spec.min_nodes)
    try:
        code = Supervisor(execution, leases=leases).run()
    finally:
        for lease in reversed(leases):
            lease.release()
    if code == faults.PREEMPTED_EXIT:
        # The node is going and everything is written (the checkpoint, the summary, the telemetry closed):
        # the interpreter's teardown (0.6 s of the notice when the option check still imported torch) does
        # nothing the operating system does not do at once.
        faults.leave(code)
    sys.exit(code)


@cli.command("profile")
@click.option("--workload", required=True, help="workload file or built-in name (tiny, sdxl)")
@click.option("--gpus", default="1,2", show_default=True, help="GPU (or CPU process) counts, e.g. 1,2")
@click.option("--batch", default="1,4,8", show_default=True, help="per-GPU batch sizes, e.g. 1,4,8")
@click.option("--steps", type=click.IntRange(min=10), default=30, show_default=True, help="steps per configuration")
@click.option("--gpu", "gpu_type", help="GPU type name as the catalog spells it (e.g. H200); default: cpu")
@click.option("--out", default="profile.yaml", show_default=True, type=OUTPUT)
@click.option("--run-root", type=click.Path(file_okay=False),
              help="where the profiling runs go (default: runs/profile-<time>)")
@click.option("--option", "options", multiple=True, help="KEY=VALUE passed to the workload (repeatable)")
@click.option("--runtime", "runtime", multiple=True, help="KEY=VALUE runner settings to profile under, e.g. "
              "compile=blocks (repeatable); recorded in the profile")
def profile_command(workload, gpus, batch, steps, gpu_type, out, run_root, options, runtime):
    """Measure a throughput profile: short runs per (GPUs, batch), fitted like `costsim calibrate`.

    Example: runner profile --workload tiny --gpus 1,2 --batch 8,32 --out tiny-measured.yaml
    """
    import datetime

    from costsim.io.files import outside_shipped_data
    from runner.profile import measure
    outside_shipped_data(out)
    counts, batches = _integers(gpus, "--gpus"), _integers(batch, "--batch")
    parse_pairs(runtime)   # a bad setting fails here, before any run
    gpu_type = gpu_type or "cpu"
    if gpu_type != "cpu":
        import torch
        if torch.cuda.device_count() < max(counts):
            raise click.BadParameter(f"{max(counts)} GPUs asked, {torch.cuda.device_count()} visible", param_hint="--gpus")
    root = Path(run_root or Path("runs") / f"profile-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    written = measure(workload, gpus=counts, batches=batches, steps=steps, gpu=gpu_type, out=out, run_root=root,
                      options=list(options), runtime=list(runtime))
    click.echo(f"wrote {written} (runs in {root})")


@cli.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--plot", type=PLOT, help="write loss, step time and samples/s over wall time "
              "(checkpoints, restarts, preemptions marked) to this PNG")
@click.option("--skip", type=click.IntRange(min=0), default=WARMUP_STEPS, show_default=True,
              help="steps after each start left out of the steady step time")
def report_command(run_dir, fmt, plot, skip):
    """What a run folder measured: step time, samples/s, checkpoints, restarts, loss, the export.

    Example: runner report runs/demo --plot run.png
    """
    import json

    from costsim.contract.telemetry import TELEMETRY
    from runner import report
    folder = Path(run_dir)
    if not (folder / TELEMETRY).is_file():
        raise InputError(run_dir, TELEMETRY, f"not a run folder: no {TELEMETRY} in it "
                         "(runner execute --run-dir makes one)")
    try:
        figures = report.measure(folder, skip)
    except ValueError as exc:
        raise InputError(run_dir, TELEMETRY, str(exc)) from None
    click.echo(json.dumps(figures, indent=2) if fmt == "json" else report.table(figures))
    if plot:
        report.plot(folder, plot)
        click.echo(f"wrote {plot}", err=True)


@cli.command("prepare-sdxl")
@click.argument("images", type=click.Path(file_okay=False))
@click.option("--model", required=True, type=click.Path(file_okay=False),
              help="a local diffusers SDXL pipeline folder (vae/, text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/)")
@click.option("--out", required=True, type=OUTPUT_FOLDER, help="the dataset folder (shards) to write")
@click.option("--vae", type=click.Path(file_okay=False), help="a VAE folder other than the pipeline's vae/")
@click.option("--resolution", type=click.IntRange(min=8), default=1024, show_default=True,
              help="square training size in pixels (the UNet's sample_size x 8)")
@click.option("--batch", type=click.IntRange(min=1), default=8, show_default=True, help="images per encoder batch")
@click.option("--shard-size", type=click.IntRange(min=1), default=256, show_default=True, help="samples per shard")
@click.option("--dtype", type=click.Choice(["bf16", "fp32"]), default="bf16", show_default=True)
@click.option("--caption-column", default="text", show_default=True, help="metadata.jsonl's caption field")
@click.option("--device", default="auto", show_default=True, help="auto (a GPU if there is one), cpu, cuda, cuda:N")
@click.option("--seed", type=SEED, default=0, show_default=True, help="seeds the VAE's latent samples")
def prepare_sdxl_command(images, model, out, vae, resolution, batch, shard_size, dtype, caption_column, device, seed):
    """Captioned images -> latents and text embeddings in safetensors shards, for --option data=OUT.

    Captions: a metadata.jsonl (file_name, text) in IMAGES, else a .txt beside each image. Resumable:
    run it again and it writes only the shards that are missing.

    Example: runner prepare-sdxl photos/ --model sdxl-base/ --out latents/
    """
    from runner.prepare_sdxl import PrepareError, prepare
    if device not in ("auto", "cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise click.BadParameter(f"{device!r}: allowed auto, cpu, cuda, cuda:N", param_hint="--device")
    try:
        paths = prepare(Path(images), Path(model), Path(out), vae=Path(vae) if vae else None, resolution=resolution,
                        batch=batch, shard_size=shard_size, dtype=dtype, seed=seed, device=device,
                        caption_column=caption_column)
    except PrepareError as exc:
        raise InputError(exc.where, exc.field, str(exc)) from None
    click.echo(f"{out}: {len(paths)} shard(s); train with --option data={out}")


@dataclass
class StorePlace:
    store: S3Store
    record: bool           # the prefix's job record is to be written (a new prefix, or a change accepted)


def check_checkpoint_place(run_dir: Path, plan, *, accept_change: bool = False) -> StorePlace | None:
    """Before anything starts: the store answers, takes writes and holds this job's checkpoints or none;
    the disk holds a checkpoint beside the newest one (older ones may make room). Reads only."""
    from runner import layout
    from runner.diskspace import free_bytes, gb
    from runner.store import StoreError, StoreUnavailable, check_job, checkpoint_place
    location = plan.checkpoint.location
    try:
        root, store = checkpoint_place(run_dir, location)
        if store is not None:
            store.check()
    except StoreUnavailable as exc:   # a store that dropped out: a node with its own checkpoint goes on from it
        if not (root.exists() and layout.saved_steps(root)):
            raise InputError("--checkpoint-dir", "checkpoint-dir", str(exc)) from None
        click.echo(f"runner: warning: {exc}: going on from this node's checkpoints ({root}); uploads are tried "
                   "again as the job saves", err=True)
    except StoreError as exc:
        raise InputError("--checkpoint-dir", "checkpoint-dir", str(exc)) from None
    place = None
    if store is not None:
        try:
            place = StorePlace(store, check_job(store, plan, accept_change=accept_change))
        except StoreUnavailable:
            place = StorePlace(store, False)   # dropped out (said above): the node's own checkpoints decide
        except StoreError as exc:
            raise InputError("--checkpoint-dir", "job", str(exc)) from None
    needed = int(plan.checkpoint.bytes or 0)
    if needed <= 0:
        return place
    steps = layout.saved_steps(root) if root.exists() else []
    # older checkpoints, and what a start removes anyway: saves cut short, removals an earlier life left half done
    folders = [layout.step_folder(root, step) for step in steps[1:]]
    folders += layout.partial_folders(root) + layout.removing_folders(root)   # none where root does not exist
    reclaimable = sum(p.stat().st_size for folder in folders for p in folder.iterdir() if p.is_file())
    free = free_bytes(root)
    if free + reclaimable < needed:
        where = "keep fewer checkpoints (plan.json checkpoint.keep), or put them on a larger disk or an object store " \
                "(--checkpoint-dir s3://bucket/prefix)"
        raise InputError(str(root), "disk", f"room for one checkpoint of {gb(needed)} is needed beside the newest, "
                         f"{gb(free)} free ({gb(reclaimable)} more in older checkpoints and unfinished saves or removals): "
                         f"{where}")
    return place


def fetch_lives(store: S3Store, folder: Path) -> None:
    """The job's lives on other nodes (their run folders' telemetry in the store) into RUN/lives/, so that
    the summary, `runner report` and `costsim calibrate` count them; a store that is out: a line."""
    from runner.store import StoreError
    try:
        count = store.fetch_lives(folder)
    except StoreError as exc:
        click.echo(f"runner: warning: {exc}: the job's lives on other nodes are not counted in this summary", err=True)
        return
    if count:
        click.echo(f"runner: {count} other run folder(s) of this job in {store.url}: their lives are counted too",
                   err=True)


def _market(path: str, plan, market: str) -> str:
    """--market checked against the markets the plan prices."""
    priced = sorted(plan.resources.price_per_node_h or {})
    if market not in priced:
        raise InputError(path, "resources.price_per_node_h", f"--market {market!r} is not priced by this plan; "
                         f"allowed: {', '.join(priced) or 'none'}")
    return market


def _integers(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected integers like 1,2,4", param_hint=flag) from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: each must be >= 1", param_hint=flag)
    return values


def _nproc(spec) -> int:
    """The plan's GPUs per node, or every GPU this node has when it has fewer (the batch split keeps
    the plan's global batch and micro-batch)."""
    if spec.cpu:
        return spec.gpus_per_node
    from runner.gpus import gpu_count
    available = gpu_count()
    if available == 0:
        raise InputError(spec.plan_path, "resources.gpu", f"the plan is for {spec.gpu} GPUs and this node has none")
    if available < spec.gpus_per_node:
        click.echo(f"runner: the plan wants {spec.gpus_per_node} GPUs per node, this node has {available}: running "
                   f"on {available} (--nproc-per-node to choose)", err=True)
        return available
    return spec.gpus_per_node


def main(argv: list[str] | None = None) -> None:
    """Entry point (see costsim.entry for the error contract)."""
    run(cli, "runner", argv)
