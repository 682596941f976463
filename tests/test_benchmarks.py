"""The benchmark scripts run (on tiny sizes); their numbers are for reading, not asserting."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_multihead_benchmark_runs_and_prints_ratios():
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "multihead_attention.py"),
            "--quick",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "time ratio" in run.stdout
    assert "worst time ratio" in run.stdout


def run_quick(name, *options):
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), "--quick", *options],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_gpt_speed_benchmark_runs_and_prints_ratios():
    assert "ratio" in run_quick("gpt_speed.py")


def test_gpt_quality_benchmark_runs_and_compares_with_the_baselines(tmp_path):
    record = tmp_path / "gpt_quality.json"
    out = run_quick("gpt_quality.py", "--json", str(record))
    assert "baby val loss" in out
    assert "best n-gram" in out
    # the record --json writes: the runs and the n-gram models they were compared with
    written = json.loads(record.read_text())
    assert written["quick"] is True
    assert set(written["runs"]) == {"baby", "baby-learned", "long"}
    assert written["runs"]["long"]["val_loss_text"] > 0
    assert written["ngram"]["order_best_on_val"] in range(4)


def test_kv_cache_benchmark_checks_the_tokens_and_prints_the_ratio():
    out = run_quick("kv_cache.py")
    assert "identical tokens: yes" in out
    assert "speed-up ratio" in out


def test_vit_digits_benchmark_trains_and_compares_with_the_baselines():
    out = run_quick("vit_digits.py")
    assert "seed 0: test accuracy" in out
    assert "kNN" in out
    assert "SVM" in out
    assert "best baseline" in out


def test_vit_ablations_benchmark_runs_every_variant():
    out = run_quick("vit_ablations.py")
    assert "mean pooling" in out
    assert "patch 4, no positions" in out


def test_warmup_digits_benchmark_runs_every_setting():
    out = run_quick("warmup_digits.py")
    assert "post-norm, no warm-up" in out
    assert "pre-norm, 50 warm-up steps" in out


def test_position_lag_benchmark_runs_every_encoding():
    out = run_quick("position_lag.py")
    for encoding in ("none", "sinusoidal", "learned", "rope", "alibi"):
        assert f"{encoding}: N = 16:" in out


def test_the_gpu_run_runs_each_notebook_and_names_its_first_failing_cell(tmp_path):
    """benchmarks/on_gpu.py (issue 28) runs each notebook in a fresh process,
    top to bottom, and reports the first cell that fails with its error (here
    on the CPU, on two small notebooks of its own)."""
    import nbformat

    def notebook(*sources):
        path = tmp_path / f"nb{len(list(tmp_path.iterdir()))}.ipynb"
        cells = [nbformat.v4.new_code_cell(source) for source in sources]
        nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
        return path

    script = str(ROOT / "benchmarks" / "on_gpu.py")
    good = notebook("x = 2", "%time y = x + 1", "assert y == 3")
    bad = notebook("x = 2", "assert x == 3, 'x is not 3'", "print('never')")
    ran = subprocess.run(
        [sys.executable, script, "--one-notebook", str(good)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "FAILED" not in ran.stdout
    ran = subprocess.run(
        [sys.executable, script, "--one-notebook", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1
    (line,) = [x for x in ran.stdout.splitlines() if x.startswith("FAILED ")]
    assert json.loads(line[len("FAILED ") :]) == {
        "cell": 2,
        "error": "AssertionError: x is not 3",
    }
    assert "never" not in ran.stdout
