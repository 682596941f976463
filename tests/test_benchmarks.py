"""The benchmark scripts run (on tiny sizes); their numbers are for reading, not asserting."""

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
