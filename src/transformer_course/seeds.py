"""A figure measured once per seed: its mean, spread and confidence interval
(chapters 6 and 7, and benchmarks/).

One training run gives one accuracy; another seed gives another. The course
reports such a figure as mean ± standard deviation over the seeds, with a 95 %
confidence interval for the mean from Student's t distribution with n − 1
degrees of freedom, and calls a difference between two settings an effect only
when their intervals do not overlap (:func:`separated`): a conservative rule,
which with three seeds asks for a large gap.

* :func:`over_seeds`: the summary of one figure's values, an :class:`OverSeeds`.
* :func:`t_quantile`: Student's t quantile (tested against SciPy's).
* :func:`record` and :func:`recorded`: the figures a script of benchmarks/
  records for the book (``--record``), written into the package and read from
  it, so that a chapter prints and asserts them on Colab too, where
  benchmarks/ is not at hand.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

__all__ = ["OverSeeds", "over_seeds", "record", "recorded", "separated", "t_quantile"]


def _t_density(x: float, df: float) -> float:
    """Student's t probability density with ``df`` degrees of freedom."""
    log_norm = (
        math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    )
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf_above_half(x: float, df: float, steps: int = 600) -> float:
    """P(T ≤ x) for x ≥ 0: 1/2 plus the density integrated over [0, x]
    (Simpson's rule with ``steps`` intervals, ample for the quantiles used)."""
    h = x / steps
    total = _t_density(0.0, df) + _t_density(x, df)
    for i in range(1, steps):
        total += (4 if i % 2 else 2) * _t_density(i * h, df)
    return 0.5 + total * h / 3


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom, for
    0.5 ≤ p < 1 (by bisection on the distribution function)."""
    if not 0.5 <= p < 1:
        raise ValueError(f"t_quantile: expected 0.5 <= p < 1, got p={p}")
    if df <= 0:
        raise ValueError(f"t_quantile: expected df > 0, got df={df}")
    low, high = 0.0, 1.0
    while _t_cdf_above_half(high, df) < p:  # t(0.975, 1) is 12.7: widen until past
        low, high = high, 2 * high
    for _ in range(45):
        middle = (low + high) / 2
        if _t_cdf_above_half(middle, df) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclass(frozen=True)
class OverSeeds:
    """One figure over n seeds: ``mean``, ``sd`` (the sample standard deviation)
    and the 95 % interval [``low``, ``high``] for the mean. Formats its numbers
    with the spec given: ``f"{acc:.1%}"`` gives "98.2% ± 1.1% (95% CI 95.6%–100.8%,
    3 seeds)"."""

    values: tuple[float, ...]
    mean: float
    sd: float
    low: float
    high: float

    def __format__(self, spec: str) -> str:
        spec = spec or "g"
        return (
            f"{self.mean:{spec}} ± {self.sd:{spec}} (95% CI {self.low:{spec}}"
            f"–{self.high:{spec}}, {len(self.values)} seeds)"
        )

    def __str__(self) -> str:
        return format(self, "")


def over_seeds(values, within: tuple[float, float] | None = None) -> OverSeeds:
    """The mean, standard deviation and 95 % t interval of ``values``, one per
    seed (at least two).

    ``within``: the range the figure can take, e.g. (0, 1) for an accuracy. A t
    interval around a mean near an end can reach past it (98 % ± 1 % over three
    seeds: up to 100.8 %); the interval is then cut at the end, since the mean
    it brackets cannot lie beyond it.
    """
    values = tuple(float(v) for v in values)
    if len(values) < 2:
        raise ValueError(
            f"over_seeds: expected the values of at least 2 seeds, got {len(values)}"
        )
    mean, sd = statistics.mean(values), statistics.stdev(values)
    half = t_quantile(0.975, len(values) - 1) * sd / math.sqrt(len(values))
    low, high = mean - half, mean + half
    if within is not None:
        low, high = max(low, within[0]), min(high, within[1])
    return OverSeeds(values, mean, sd, low, high)


def separated(a: OverSeeds, b: OverSeeds) -> bool:
    """True when the two 95 % intervals do not overlap: the course's bar for
    calling a difference between two settings an effect."""
    return a.high < b.low or b.high < a.low


def _recorded_path(name: str):
    return resources.files("transformer_course") / "recorded" / f"{name}.json"


def record(name: str, figures: dict) -> Path:
    """Write ``figures`` (JSON-able) as the recorded figures of
    ``benchmarks/<name>.py``, with the run's PyTorch version, threads and
    machine; returns the file. For the benchmark scripts' ``--record``."""
    path = Path(str(_recorded_path(name)))
    content = {
        "benchmark": f"benchmarks/{name}.py",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        **figures,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
    return path


def recorded(name: str) -> dict:
    """The figures ``benchmarks/<name>.py --record`` wrote, as a dict (read from
    ``transformer_course/recorded/<name>.json``)."""
    path = _recorded_path(name)
    if not path.is_file():
        raise FileNotFoundError(
            f"recorded: no figures named {name!r} in the package; make them with "
            f"python benchmarks/{name}.py --record"
        )
    return json.loads(path.read_text(encoding="utf-8"))
