"""transformer_course.seeds: a figure over seeds, against SciPy's Student t."""

from __future__ import annotations

import json
import math
import statistics
from importlib import resources
from pathlib import Path

import pytest
from scipy import stats

import transformer_course as tc
from transformer_course.seeds import over_seeds, separated, t_quantile

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 29, 100])
@pytest.mark.parametrize("p", [0.5, 0.8, 0.9, 0.975, 0.995])
def test_t_quantile_matches_scipy(p, df):
    assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-4, abs=1e-9)


def test_t_quantile_refuses_what_it_does_not_compute():
    with pytest.raises(ValueError, match=r"expected 0.5 <= p < 1, got p=0.2"):
        t_quantile(0.2, 3)
    with pytest.raises(ValueError, match=r"expected df > 0, got df=0"):
        t_quantile(0.975, 0)


def test_over_seeds_is_mean_sd_and_scipys_t_interval():
    values = [0.9694, 0.9861, 0.9889]
    summary = over_seeds(values)
    assert summary.mean == pytest.approx(statistics.mean(values))
    assert summary.sd == pytest.approx(statistics.stdev(values))
    low, high = stats.t.interval(
        0.95, len(values) - 1, loc=summary.mean, scale=summary.sd / math.sqrt(3)
    )
    assert (summary.low, summary.high) == pytest.approx((low, high), rel=1e-5)
    assert f"{summary:.1%}".startswith("98.1% ± 1.1% (95% CI 95.5%–100.8%, 3 seeds")
    with pytest.raises(ValueError, match="at least 2 seeds, got 1"):
        over_seeds([0.5])


def test_separated_only_when_the_intervals_do_not_overlap():
    a = over_seeds([0.70, 0.71, 0.72])
    b = over_seeds([0.90, 0.91, 0.92])
    wide = over_seeds([0.60, 0.80, 0.95])
    assert separated(a, b)
    assert separated(b, a)
    assert not separated(a, wide)
    assert not separated(wide, b)


def test_every_recorded_figure_file_comes_from_a_benchmark_that_records_it():
    folder = resources.files("transformer_course") / "recorded"
    names = sorted(
        p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json")
    )
    assert names, "the book reads recorded figures: at least one file"
    for name in names:
        figures = tc.recorded(name)
        script = ROOT / figures["benchmark"]
        assert script == ROOT / "benchmarks" / f"{name}.py"
        text = script.read_text()  # its --record writes this very file
        assert "args.record" in text
        assert f'"{name}"' in text
        assert len(figures["seeds"]) >= 3
    with pytest.raises(FileNotFoundError, match=r"benchmarks/nothing\.py --record"):
        tc.recorded("nothing")


def test_the_recorded_files_are_in_the_package_data():
    config = (ROOT / "pyproject.toml").read_text()
    assert '"recorded/*.json"' in config
    json.loads((ROOT / "src/transformer_course/recorded/vit_digits.json").read_text())


def test_record_writes_what_recorded_reads(monkeypatch, tmp_path):
    """A benchmark's --record: the figures plus the run's torch, threads and
    machine, read back by tc.recorded (here in a copy of the package folder)."""
    from transformer_course import seeds

    monkeypatch.setattr(seeds, "_recorded_path", lambda name: tmp_path / f"{name}.json")
    path = seeds.record("demo", {"seeds": [0, 1, 2], "vit": [0.9, 0.95, 0.97]})
    assert path == tmp_path / "demo.json"
    figures = seeds.recorded("demo")
    assert figures["benchmark"] == "benchmarks/demo.py"
    assert figures["vit"] == [0.9, 0.95, 0.97]
    assert figures["threads"] >= 1
    assert figures["torch"].startswith("2.")


def test_an_interval_is_cut_at_the_ends_of_what_the_figure_can_be():
    values = [0.9694, 0.9861, 0.9889]  # chapter 7's ViT: the t interval passes 1
    assert tc.over_seeds(values).high > 1
    cut = tc.over_seeds(values, within=(0, 1))
    assert cut.high == 1
    assert cut.low == tc.over_seeds(values).low  # the other end as it was
    assert cut.mean == tc.over_seeds(values).mean
