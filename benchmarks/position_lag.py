"""Chapter 5's lag task over seeds: five position encodings, tested at the
trained length and beyond.

Each encoding of ``tc.position_tasks.ENCODINGS`` (none, sinusoidal, learned,
RoPE, ALiBi) trains a two-block ``TokenModel`` for 400 steps on sequences of
16 tokens to output, at every position n ≥ 3, the token three places back;
seed 0 is the chapter's own run. Each model is tested on sequences of 16, 32 and
64 tokens. Chapter 5 prints the accuracies' means, spreads and 95 % intervals
and asserts what it says of them.

    python benchmarks/position_lag.py            # 5 seeds, about 3 minutes on 2 cores
    python benchmarks/position_lag.py --record   # and write the figures for the book
    python benchmarks/position_lag.py --quick    # a few steps, one seed: a smoke test
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see gpt_quality.py

import torch
from seed_runs import parse_seed_run  # benchmarks/seed_runs.py

from transformer_course.position_tasks import ENCODINGS, lag_accuracy, train_lag
from transformer_course.seeds import over_seeds, record

LENGTHS = (16, 32, 64)  # trained on 16


def main(argv=None):
    args = parse_seed_run(__doc__, "position_lag", chapter=5, seeds=5, argv=argv)
    steps, warmup = (3, 1) if args.quick else (400, 20)
    seeds = range(1 if args.quick else args.seeds)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"{steps} steps, seeds {list(seeds)}"
    )
    figures = {}
    for encoding in ENCODINGS:
        accuracies = {length: [] for length in LENGTHS}
        start = time.perf_counter()
        for seed in seeds:
            model = train_lag(encoding, steps=steps, seed=seed, warmup_steps=warmup)
            for length in LENGTHS:
                accuracies[length].append(lag_accuracy(model, length).mean().item())
        seconds = (time.perf_counter() - start) / len(seeds)
        figures[encoding] = {
            str(length): values for length, values in accuracies.items()
        }
        summary = ", ".join(
            f"N = {length}: "
            + (f"{over_seeds(v, within=(0, 1)):.1%}" if len(v) > 1 else f"{v[0]:.1%}")
            for length, v in accuracies.items()
        )
        print(f"{encoding:>10}: {summary}; {seconds:.1f} s per seed")
    if args.record and not args.quick:
        path = record(
            "position_lag", {"steps": steps, "seeds": list(seeds), "accuracy": figures}
        )
        print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    main()
