"""Chapter 7's ablations at full length: pooling, patch size and positions.

Each variant changes one field of ``tc.train_vit.DIGITS`` and is trained with the
same loop for the same number of steps, seeds 0, 1 and 2, on the course's
digits split; the script prints the test accuracy's mean and spread and the
training time. The chapter runs shorter versions of the same comparisons
inside its time budget; these are the longer ones it can point to (issue 14).

    python benchmarks/vit_ablations.py           # about 12 minutes on 2 cores
    python benchmarks/vit_ablations.py --quick   # a few steps, a smoke test
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see gpt_quality.py

import torch
from seed_runs import parse_seed_run  # benchmarks/seed_runs.py

import transformer_course as tc
from transformer_course.seeds import record
from transformer_course.train_vit import DIGITS, train_on_digits

#: name: the fields of DIGITS.model that the variant changes
VARIANTS = {
    "class token, patch 2, positions (DIGITS)": {},
    "mean pooling": {"pool": "mean"},
    "patch 1 (64 tokens)": {"patch_size": 1},
    "patch 4 (4 tokens)": {"patch_size": 4},
    "patch 2, no positions": {"positions": False},
    "patch 4, no positions": {"patch_size": 4, "positions": False},
}


def main(argv=None):
    args = parse_seed_run(__doc__, "vit_ablations", chapter=7, seeds=3, argv=argv)
    digits = tc.load_digits()
    run = replace(DIGITS, train={**DIGITS.train, "eval_every": None})
    if args.quick:
        run = replace(run, train={**run.train, "steps": 3, "warmup_steps": 1})
    seeds = range(1 if args.quick else args.seeds)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"{run.train['steps']} steps each, seeds {list(seeds)}"
    )
    results, per_seed = {}, {}
    for name, changes in VARIANTS.items():
        accuracies, seconds = [], []
        for seed in seeds:
            start = time.perf_counter()
            model, _ = train_on_digits(digits, run, seed=seed, **changes)
            seconds.append(time.perf_counter() - start)
            with torch.no_grad():
                predicted = model(digits.x_test).argmax(-1)
            accuracies.append((predicted == digits.y_test).float().mean().item())
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        results[name] = (statistics.mean(accuracies), spread)
        per_seed[name] = {"changes": changes, "accuracies": accuracies}
        print(
            f"{name:>42}: {results[name][0]:.2%} ± {spread:.2%} "
            f"({', '.join(f'{a:.2%}' for a in accuracies)}), "
            f"{statistics.mean(seconds):.0f} s per seed"
        )
    if args.record and not args.quick:
        figures = {
            "steps": run.train["steps"],
            "seeds": list(seeds),
            "variants": per_seed,
        }
        path = record("vit_ablations", figures)
        print(f"figures written to {path}")
    return results


if __name__ == "__main__":
    main()
