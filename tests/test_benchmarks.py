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
