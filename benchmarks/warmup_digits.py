"""Chapter 4's warm-up experiment over seeds: post-norm and pre-norm, with and
without 50 steps of learning-rate warm-up.

The digit classifier of chapter 4 (``tc.digit_rows``: 12 blocks of width 32,
4 heads), trained for 150 steps at a peak learning rate of 1e-2, once per
setting and seed (seed 0 is the chapter's own run). For each run it records the
final validation loss, the test accuracy and how far the validation loss
climbs again after step 50, where the warm-up ends (``rise_after``). Chapter 4
prints their means, spreads and 95 % intervals and asserts what it says of them.

    python benchmarks/warmup_digits.py            # 5 seeds, about 2 minutes on 2 cores
    python benchmarks/warmup_digits.py --record   # and write the figures for the book
    python benchmarks/warmup_digits.py --quick    # a few steps, one seed: a smoke test
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see gpt_quality.py

import torch
from seed_runs import parse_seed_run  # benchmarks/seed_runs.py

import transformer_course as tc
from transformer_course.digit_rows import rise_after, row_accuracy, train_rows
from transformer_course.seeds import over_seeds, record

#: name: (norm_first, warmup_steps), as chapter 4 names its runs
SETTINGS = {
    "pre-norm, no warm-up": (True, 0),
    "post-norm, no warm-up": (False, 0),
    "pre-norm, 50 warm-up steps": (True, 50),
    "post-norm, 50 warm-up steps": (False, 50),
}
LR, STEPS, WARMED = 1e-2, 150, 49  # step 49 is the 50th: the warm-up's last


def main(argv=None):
    args = parse_seed_run(__doc__, "warmup_digits", chapter=4, seeds=5, argv=argv)
    digits = tc.load_digits()
    steps, n_blocks = (3, 2) if args.quick else (STEPS, 12)
    seeds = range(1 if args.quick else args.seeds)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"{steps} steps at lr {LR}, seeds {list(seeds)}"
    )
    figures = {}
    for name, (norm_first, warmup) in SETTINGS.items():
        config = tc.BlockConfig(d_model=32, n_heads=4, norm_first=norm_first)
        runs = {"val_loss": [], "accuracy": [], "rise": []}
        start = time.perf_counter()
        for seed in seeds:
            warmup_steps = min(warmup, steps - 1)
            model, history = train_rows(
                digits,
                config,
                n_blocks=n_blocks,
                lr=LR,
                warmup_steps=warmup_steps,
                steps=steps,
                seed=seed,
            )
            runs["val_loss"].append(history.val_losses[-1])
            runs["accuracy"].append(row_accuracy(model, digits))
            measured = WARMED if WARMED in history.val_steps else history.val_steps[0]
            runs["rise"].append(rise_after(history, measured))
        seconds = (time.perf_counter() - start) / len(seeds)
        figures[name] = runs
        summary = ", ".join(
            f"{key} {over_seeds(values):.3f}"
            if len(values) > 1
            else f"{key} {values[0]:.3f}"
            for key, values in runs.items()
        )
        print(f"{name:>28}: {summary}; {seconds:.1f} s per seed")
    if args.record and not args.quick:
        path = record(
            "warmup_digits",
            {"steps": steps, "lr": LR, "seeds": list(seeds), "settings": figures},
        )
        print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    main()
