"""Bad input: one line naming the file (or flag), the field and what is allowed; exit 2; no traceback."""

from pathlib import Path

import pytest


def check(result, *fragments):
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def write(tmp_path, text, name="w.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


GOOD = ("name: x\nmodel: sdxl-unet\nsamples: 100000\nglobal_batch: 64\ndeadline: 36h\n"
        "profile: sdxl-unet\n")


def test_missing_workload_file(run_cli, tmp_path):
    check(run_cli("plan", "--workload", str(tmp_path / "none.yaml")), "none.yaml", "file", "not found")


def test_unknown_builtin_workload_lists_the_builtins(run_cli):
    check(run_cli("plan", "--workload", "nosuch"), "nosuch", "built-ins: sdxl, tiny")


def test_bad_yaml(run_cli, tmp_path):
    check(run_cli("plan", "--workload", write(tmp_path, "name: x\nmodel: [\n")), "w.yaml", "not valid YAML")


def test_workload_that_is_not_a_mapping(run_cli, tmp_path):
    check(run_cli("plan", "--workload", write(tmp_path, "- a\n- b\n")), "w.yaml", "document", "mapping")


@pytest.mark.parametrize("field, value, message", [
    ("deadline", "-5h", "positive duration"), ("deadline", "0s", "positive duration"),
    ("deadline", "soon", "positive duration"), ("samples", "-3", "an integer > 0"),
    ("global_batch", "2.5", "an integer > 0"), ("p_deadline", "1.5", "probability"),
])
def test_bad_field_values(run_cli, tmp_path, field, value, message):
    lines = [line for line in GOOD.splitlines() if not line.startswith(field + ":")] + [f"{field}: {value}"]
    check(run_cli("plan", "--workload", write(tmp_path, "\n".join(lines) + "\n")), "w.yaml", field, message)


def test_missing_required_field(run_cli, tmp_path):
    text = "\n".join(line for line in GOOD.splitlines() if not line.startswith("samples")) + "\n"
    check(run_cli("plan", "--workload", write(tmp_path, text)), "w.yaml", "samples", "missing")


def test_unknown_field_lists_the_allowed_ones(run_cli, tmp_path):
    check(run_cli("plan", "--workload", write(tmp_path, GOOD + "deadlin: 3h\n")), "deadlin", "allowed:")


@pytest.mark.parametrize("command", [("plan", "--workload", "tiny"), ("validate", "--workload", "tiny"),
                                     ("simulate", "--workload", "tiny", "--offering", "owned/local-cpu")])
def test_a_seed_numpy_cannot_take_is_refused(run_cli, command):
    """numpy's seed sequences raise on a negative seed: it was a traceback, exit 1."""
    for seed in ("-1", str(2**32)):
        check(run_cli(*command, "--seed", seed), "--seed", "0<=x<=4294967295")


@pytest.mark.parametrize("flag", ["--out", "--plot"])
def test_an_output_under_a_file_is_refused_before_the_work(run_cli, tmp_path, flag):
    """It was found after planning, and named by its temporary file (`.out.png.3vbafo8a.png: File exists`)."""
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    target = blocker / "out.png"
    result = run_cli("plan", "--workload", "tiny", flag, str(target), "--out" if flag == "--plot" else "--trials",
                     str(tmp_path / "p.json") if flag == "--plot" else "10")
    check(result, flag, f"{target}: {blocker} is a file, not a folder")
    assert "configurations simulated" not in result.stderr and not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("command", [("plan", "--workload", "tiny"), ("compare", "--scenario", "h100-team")])
def test_a_plot_in_a_format_matplotlib_lacks_is_refused_before_the_work(run_cli, tmp_path, command):
    """It was matplotlib's traceback (exit 1) once the plan was made."""
    result = run_cli(*command, "--plot", str(tmp_path / "plan.xyz"))
    check(result, "--plot", "no figure format .xyz; allowed:", "png", "svg")
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no file can be made")
def test_an_output_that_fails_as_it_is_written_is_named_not_its_temporary_file(tmp_path):
    from costsim.io import write_atomic
    target = Path("/proc/costsim-plan.json")
    with pytest.raises(OSError) as failed:
        write_atomic(target, "{}")
    assert failed.value.filename == str(target)


def test_a_run_given_twice_to_calibrate_is_refused(run_cli, tmp_path):
    """It was fitted twice, and its figures weighed twice."""
    check(run_cli("calibrate", str(tmp_path), f"{tmp_path}/"), "runs: given twice", f"also as {tmp_path}")


def test_a_trace_folder_without_traces_is_refused_not_ignored(run_cli, tmp_path):
    """Without a trace in it, the folder's trials drew from the model under a line that said 'one per trace file'."""
    check(run_cli("simulate", "--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--trace", str(tmp_path)),
          str(tmp_path), "no *.json capacity traces")


def test_a_trace_folder_whose_traces_lie_further_down_names_where(run_cli, tmp_path):
    """A copy of skypilot-org/spot-traces named at its root (availability/1-node/<period>/*.json): the error names the
    subfolders that hold traces, with how many, for the user to pick one."""
    deep = tmp_path / "availability" / "1-node"
    for period, zones in (("aws-a", 2), ("aws-b", 1)):
        (deep / period).mkdir(parents=True)
        for z in range(zones):
            (deep / period / f"z{z}.json").write_text('{"metadata": {"gap_seconds": 600}, "data": [0, 1]}')
    check(run_cli("simulate", "--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--trace", str(tmp_path)),
          str(tmp_path), "no *.json capacity traces", "availability/1-node/aws-a (2), availability/1-node/aws-b (1)")


def test_unknown_gpu_flag(run_cli):
    check(run_cli("plan", "--workload", "sdxl", "--gpu", "Z100"), "--gpu", "Z100", "allowed:")


def test_unknown_gpu_in_workload(run_cli, tmp_path):
    check(run_cli("plan", "--workload", write(tmp_path, GOOD + "gpus: [Z100]\n")), "w.yaml", "gpus", "Z100")


def test_unknown_owned_sku(run_cli, tmp_path):
    check(run_cli("plan", "--workload", write(tmp_path, GOOD + "owned: [{sku: dgx-z, nodes: 1}]\n")),
          "owned.sku", "dgx-z", "allowed:")


def test_unknown_offering_for_simulate(run_cli):
    check(run_cli("simulate", "--workload", "sdxl", "--offering", "aws/nowhere/x"), "--offering", "catalog")


@pytest.mark.parametrize("deadline, said", [("1h", "60.0m"), ("1s", "1s")])   # 1s once read "0.0h"
def test_deadline_shorter_than_the_work(run_cli, deadline, said):
    check(run_cli("plan", "--workload", "sdxl", "--deadline", deadline), "--deadline", f"{said} is shorter than the fastest")


def test_a_deadline_with_no_time_to_start_is_one_line_and_no_empty_table(run_cli):
    """2 h: the fastest configuration's work fits, its start does not; nothing is left to simulate. It used to
    print an empty table and 'Prices: .' before the error."""
    result = run_cli("plan", "--workload", "sdxl", "--deadline", "2h")
    check(result, "--deadline", "2.0h is shorter than the fastest configuration needs without a single preemption")
    assert result.stdout == ""


def test_profile_missing_for_the_gpu_type(run_cli, tmp_path):
    check(run_cli("plan", "--workload", "sdxl", "--gpu", "T4"), "sdxl-unet.yaml", "gpus", "T4")
    profile = write(tmp_path, "id: p\nmodel: sdxl-unet\nsource: s\ndate: 2026-01-01\ncheckpoint_bytes: 1\n"
                    "checkpoint_save: 1s\ncheckpoint_stall: 0s\nrestart: 1s\nstartup: 1s\ngpus:\n  Q1:\n"
                    "    compute_overhead: 0s\n    compute_per_sample: 1s\n    max_batch_per_gpu: 1\n", "p.yaml")
    check(run_cli("plan", "--workload", "sdxl", "--profile", profile), "p.yaml", "gpus", "add gpus.<TYPE>")


def test_bad_duration_flag_is_one_line(run_cli):
    check(run_cli("plan", "--workload", "sdxl", "--deadline", "-3h"), "--deadline", "positive duration")


def test_bare_simulate_needs_prices_for_its_markets(run_cli):
    check(run_cli("simulate", "--work-hours", "1", "--deadline", "2h", "--checkpoint-interval", "1h",
                  "--policy", "greedy", "--preemption-mtbf", "1h", "--spot-price", "1"), "--on-demand-price")


def test_bare_simulate_of_an_owned_server_needs_its_cost_of_ownership(run_cli):
    """It billed 0.00 (an owned server is not free: its TCO share by the hour)."""
    args = ["simulate", "--work-hours", "4", "--deadline", "10h", "--checkpoint-interval", "1h", "--policy", "owned",
            "--trials", "10"]
    check(run_cli(*args), "--owned-price", "policy owned runs on owned")
    priced = run_cli(*args, "--owned-price", "12.5", "--format", "json").json()
    assert priced["cost"]["mean"] == pytest.approx(4 * 12.5)


def test_bare_simulate_needs_a_spot_model(run_cli):
    check(run_cli("simulate", "--work-hours", "1", "--deadline", "2h", "--checkpoint-interval", "1h",
                  "--spot-price", "1"), "--preemption-mtbf", "--trace")


def test_trace_file_missing_or_malformed(run_cli, tmp_path):
    args = ["simulate", "--work-hours", "1", "--deadline", "2h", "--checkpoint-interval", "1h", "--spot-price", "1"]
    check(run_cli(*args, "--trace", str(tmp_path / "no.json")), "no.json", "not found")
    bad = tmp_path / "bad.json"
    for data in ("[0, 0.5, 1]", "[0, -2, 1]", '[0, "1"]'):   # 2 and more: a multi-node count trace
        bad.write_text(f'{{"metadata": {{"gap_seconds": 60}}, "data": {data}}}')
        check(run_cli(*args, "--trace", str(bad)), "bad.json", "data", "0 (spot available) or 1", "count trace")


def test_missing_flags_for_bare_simulate(run_cli):
    check(run_cli("simulate", "--work-hours", "1"), "--deadline", "--checkpoint-interval")


@pytest.mark.parametrize("old, new, field", [
    ("checkpoint_stall: ", "checkpoint_stal: ", "checkpoint_stal"),
    ("    compute_overhead: ", "    compute_overhed: ", "gpus.cpu.compute_overhed"),
])
def test_a_typo_in_a_profile_is_refused_not_defaulted(run_cli, tmp_path, old, new, field):
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "data" / "profiles" / "tiny.yaml").read_text()
    assert old in text
    check(run_cli("plan", "--workload", "tiny", "--profile", write(tmp_path, text.replace(old, new, 1))),
          "w.yaml", field, "unknown field", "allowed:")


# -- durations carry their unit (36 could be seconds or hours) -----------------------------------
@pytest.mark.parametrize("args, flag", [
    (("plan", "--workload", "sdxl", "--deadline", "36"), "--deadline"),
    (("compare", "--fleet", "h100-team", "--hardware", "hgx-h100-8", "--horizon", "12"), "--horizon"),
    (("simulate", "--work-hours", "1", "--deadline", "2h", "--checkpoint-interval", "20",
      "--preemption-mtbf", "1h", "--spot-price", "1"), "--checkpoint-interval"),
    (("control", "plan.json", "--deadline", "16"), "--deadline"),
    (("control", "plan.json", "--poll", "0.1"), "--poll"),
])
def test_a_bare_number_for_a_duration_flag_is_refused_with_the_units(run_cli, args, flag):
    result = run_cli(*args)
    check(result, flag, "without a unit", "s, m, h, d, w, y")
    number = args[args.index(flag) + 1]
    assert f"got {number} without a unit" in result.stderr and f"{number}h" in result.stderr


def test_a_bare_number_for_a_duration_in_a_file_is_refused_with_the_units(run_cli, tmp_path):
    text = GOOD.replace("deadline: 36h", "deadline: 36")
    check(run_cli("plan", "--workload", write(tmp_path, text)), "w.yaml", "deadline", "got 36 without a unit", "36h")


def test_zero_needs_no_unit_where_zero_is_allowed(run_cli):
    result = run_cli("simulate", "--work-hours", "1", "--deadline", "2h", "--checkpoint-interval", "20m",
                     "--restart-cost", "0", "--preemption-mtbf", "1h", "--spot-price", "1", "--trials", "20")
    assert result.exit_code == 0, result.stderr


def test_runner_durations_carry_units_too():
    from click.testing import CliRunner

    from runner.cli import cli
    result = CliRunner().invoke(cli, ["execute", "plan.json", "--rdzv-timeout", "60"])
    assert result.exit_code == 2 and "got 60 without a unit" in result.output, result.output


def test_a_profile_of_another_model_is_refused(run_cli):
    from costsim import io
    tiny = io.load_profile("tiny").path
    check(run_cli("plan", "--workload", "sdxl", "--profile", tiny), "tiny.yaml", "model",
          "measures 'tiny'", "trains 'sdxl-unet'")


def test_calibrate_never_writes_into_the_shipped_data_and_says_where_it_wrote(run_cli, tmp_path):
    from pathlib import Path

    from costsim import io
    run = Path(__file__).resolve().parents[1] / "data" / "measurements" / "2026-11-29-h200-sdxl-speed" / \
        "profile-1gpu-blocks-b8"
    shipped = io.data_dir() / "profiles" / "sdxl-unet.yaml"
    before = shipped.read_bytes()
    check(run_cli("calibrate", str(run), "--out", str(shipped)), "--out", "shipped data")
    assert shipped.read_bytes() == before
    out = tmp_path / "mine.yaml"
    result = run_cli("calibrate", str(run), "--out", str(out), "--format", "json")
    assert result.exit_code == 0 and out.exists() and f"wrote the calibrated profile to {out}" in result.stderr


@pytest.mark.parametrize("error, code, line", [
    (FileNotFoundError(2, "No such file or directory", "runs/x/plan.json"), 2,
     "error: runs/x/plan.json: No such file or directory"),
    (PermissionError(13, "Permission denied", "/etc/plan.json"), 2, "error: /etc/plan.json: Permission denied"),
    (OSError(28, "No space left on device", "out/plan.json"), 1, "error: out/plan.json: No space left on device"),
    (OSError(5, "Input/output error"), 1, "error: Input/output error"),
])
def test_an_os_error_is_bad_input_only_when_it_is_about_a_path_the_user_named(capsys, error, code, line):
    """Exit 2 is bad input; a full disk or an I/O error is the command failing (1), not the user's input."""
    import click

    from costsim.entry import run

    @click.group()
    def group():
        pass

    @group.command()
    def go():
        raise error

    with pytest.raises(SystemExit) as done:
        run(group, "costsim", ["go"])
    assert done.value.code == code and capsys.readouterr().err.strip() == line


def test_a_recent_past_longer_than_every_trace_is_refused(run_cli):
    """Every window was left out and the table judged none, without a word of why beyond its legend."""
    result = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "10",
                     "--group", "2023/us-east-1a", "--recent-past", "1000d")
    assert result.exit_code == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "--recent-past 1000.0d: no held-out window has that much trace before it" in last, last
    assert "the most any has is 39.2d" in last, last   # the last window on 45 days of trace starts a horizon before its end
    assert "left out" in last and "stated" not in result.stdout
