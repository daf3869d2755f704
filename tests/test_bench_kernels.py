"""scripts/bench_sdxl.py's kernel breakdown: the H200 profile's kernel names sorted into kinds, and the step's FLOPs
counted on the meta device as on real tensors."""

import importlib.util
import json
import re
from pathlib import Path

import pytest


def _bench():
    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_sdxl.py"
    spec = importlib.util.spec_from_file_location("bench_sdxl", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# kernel names from the SDXL step profiled on an H200 (data/measurements/2026-12-05-h200-kernels), torch 2.11
NAMES = {
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0": "attention",
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128>>": "attention",
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float>": "layout change (cuDNN)",
    "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64": "convolution",
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x128x64": "convolution",
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT": "matrix multiply",
    "triton_tem_fused__to_copy_mm_t_transpose_view_10": "matrix multiply",
    "triton_poi_fused_cat_gelu_gelu_backward_mul_split_view_75": "Inductor fused (triton)",
    "triton_red_fused__to_copy_add_div_native_layer_norm_view_64": "Inductor fused (triton)",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
    "Memset (Device)": "copy / fill",
}


def test_profiled_kernels_sort_into_their_kinds():
    bench = _bench()
    record = {"steps": 2, "kernels": [{"name": name, "count": 2, "us": 2e6} for name in NAMES]}
    kinds = {kind: n for kind, _, n in bench.kernel_kinds(record)}
    expected: dict[str, int] = {}
    for kind in NAMES.values():
        expected[kind] = expected.get(kind, 0) + 1
    assert kinds == expected
    one = {"steps": 4, "kernels": [{"name": "nvjet_x", "count": 8, "us": 2e6}, {"name": "something", "count": 4, "us": 1e6}]}
    assert bench.kernel_kinds(one) == [("matrix multiply", 0.5, 2), ("other", 0.25, 1)]   # per step, largest first


def test_meta_device_flops_are_the_real_steps():
    torch = pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    from diffusers import UNet2DConditionModel
    from torch.utils.flop_counter import FlopCounterMode

    from runner.workloads.sdxl import load_config
    from tests.sdxl_tiny import TINY_UNET

    counted = _bench().flops_by_kind(2, str(TINY_UNET))
    cfg = load_config(str(TINY_UNET))
    size = cfg["sample_size"]
    pooled = cfg["projection_class_embeddings_input_dim"] - 6 * cfg["addition_time_embed_dim"]
    model = UNet2DConditionModel.from_config(cfg)
    with FlopCounterMode(display=False) as counter:
        out = model(torch.randn(2, 4, size, size), torch.randint(0, 1000, (2,)),
                    encoder_hidden_states=torch.randn(2, 77, cfg["cross_attention_dim"]),
                    added_cond_kwargs={"text_embeds": torch.randn(2, pooled), "time_ids": torch.randn(2, 6)}).sample
        out.float().pow(2).mean().backward()
    real = {str(op).split(".")[1] if "." in str(op) else str(op): flops
            for op, flops in counter.get_flop_counts()["Global"].items()}
    assert counted["matrix multiply"] == real.get("mm", 0) + real.get("addmm", 0) > 0
    assert counted["convolution"] == real["convolution"] + real["convolution_backward"] > 0
    assert counted["attention"] > 0   # the math path's batched multiplies (a CPU run counts its fused kernel)


def test_feed_forward_ways_compute_what_diffusers_geglu_computes(tmp_path):
    """scripts/bench_geglu.py's compiled ways against eager diffusers: the split projection differs from the default
    by bf16's rounding only (on CPU; the device run prints the same figures at SDXL's shapes)."""
    import json
    import subprocess
    import sys
    pytest.importorskip("diffusers")
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_geglu.py"
    out = tmp_path / "geglu.json"
    subprocess.run([sys.executable, str(script), "--tiny", "--out", str(out)], check=True, timeout=300)
    shape = json.loads(out.read_text())["shapes"]["tiny"]
    assert all(n >= 1 for n in shape["graphs"].values())   # no way ran another's compiled graph
    difference = shape["difference"]
    assert set(difference) == {"default", "split"} and difference["default"]["default"] == 0.0
    assert 0 < difference["split"]["default"] < 2 ** -6   # bf16 keeps 8 bits: a few roundings apart
    assert all(d["eager"] < 2 ** -5 for d in difference.values())


def test_the_report_says_how_long_each_first_step_recorded_cuda_graphs():
    """The bench's rows carry their first step's compile report (since 2026-12-06); the report's `graphs s` column is
    torch's time recording CUDA graphs in it, empty for rows that recorded none (the default mode)."""
    folder = Path(__file__).resolve().parents[1] / "data" / "measurements" / "2026-12-06-h100-graph-recording"
    lines = _bench().report(folder / "bench_sdxl.jsonl").splitlines()
    head = next(line for line in lines if line.startswith("loop"))
    assert head.rstrip().endswith("graphs s")
    rows = {" ".join(re.search(r"split (\S+) 4x16 \((\w+)\)", line).groups()): line   # type: ignore[union-attr]
            for line in lines if line.startswith("runner:")}
    assert set(rows) == {"reduce-overhead cold", "default cold", "reduce-overhead warm", "default warm"}
    assert rows["reduce-overhead cold"].split()[-1] == "10.0" and rows["reduce-overhead warm"].split()[-1] == "37.5"
    assert rows["default cold"].split()[-1] == "26.9" and rows["default warm"].split()[-1] == "22.1"   # first step only


def test_the_kernel_report_totals_the_step():
    """`bench_sdxl.py kernels FILE`: its `all` row is the device's busy time and the kernels a step, the kinds' sums
    (data/measurements/2026-12-06-h100-host-bound: 174,946 kernels in 3.931 s of a 6.826 s profiled step)."""
    path = Path(__file__).resolve().parents[1] / "data" / "measurements" / "2026-12-06-h100-host-bound" / "kernels-3.json"
    bench = _bench()
    kinds = bench.kernel_kinds(json.loads(path.read_text()))
    total = next(line for line in bench.kernels_report(path).splitlines() if line.startswith("all ")).split()
    assert total[1] == f"{sum(s for _, s, _ in kinds):.3f}" == "3.931" and total[2] == "100.0%"
    assert int(total[3]) == sum(n for _, _, n in kinds) == 174946
