"""Test accuracy of tc.ViT on scikit-learn's digits, against kNN and an SVM.

The course's fixed stratified split (``tc.load_digits()``: 1,437 training and
360 test images, 8×8, one channel). The ViT is trained with the course's loop
``tc.fit`` on the training images only, for a fixed number of steps (no early
stopping on the test set), with seeds 0, 1 and 2; the baselines are fitted in
the same run on the same pixels, their hyperparameters chosen by 5-fold
cross-validation on the training images alone (issue 14). Goal: the ViT's mean
test accuracy at or above the better baseline, with at most 60 s of training
per seed on 2 CPU cores.

    python benchmarks/vit_digits.py           # 3 seeds, about 3 minutes
    python benchmarks/vit_digits.py --quick   # a few steps, a smoke test
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
from transformer_course.train_vit import DIGITS, fit_on_digits, train_on_digits

SECONDS_PER_SEED = 60


def main(argv=None):
    args = parse_seed_run(__doc__, "vit_digits", chapter=7, seeds=3, argv=argv)
    digits = tc.load_digits()
    run = DIGITS
    if args.quick:
        run = replace(run, train={**run.train, "steps": 3, "warmup_steps": 1})
    seeds = range(1 if args.quick else args.seeds)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); digits "
        f"{len(digits.y_train)} train / {len(digits.y_test)} test; ViT {run.model}, "
        f"{run.train['steps']} steps"
    )

    def accuracy(model):
        with torch.no_grad():
            return (
                (model(digits.x_test).argmax(-1) == digits.y_test).float().mean().item()
            )

    accuracies, seconds, cnn = [], [], []
    for seed in seeds:
        start = time.perf_counter()
        model, _ = train_on_digits(digits, run, seed=seed)
        seconds.append(time.perf_counter() - start)
        accuracies.append(accuracy(model))
        torch.manual_seed(seed)
        small_cnn = tc.SmallCNN()
        fit_on_digits(small_cnn, digits, run, seed=seed)  # the same loop and steps
        cnn.append(accuracy(small_cnn))
        print(
            f"seed {seed}: test accuracy {accuracies[-1]:.2%} in {seconds[-1]:.0f} s "
            f"(small CNN, same training: {cnn[-1]:.2%})"
        )
    mean = statistics.mean(accuracies)
    spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
    print(
        f"ViT: mean {mean:.2%} ± {spread:.2%} (sd over {len(accuracies)} seeds), "
        f"{max(seconds):.0f} s of training per seed at most"
    )
    cnn_spread = statistics.stdev(cnn) if len(cnn) > 1 else 0.0
    print(f"small CNN: mean {statistics.mean(cnn):.2%} ± {cnn_spread:.2%}")
    results = tc.knn_and_svm(digits)
    for name, (value, params) in results.items():
        print(f"{name}: {value:.2%} (chosen by 5-fold CV on train: {params})")
    best_name = max(results, key=lambda n: results[n][0])
    best = results[best_name][0]
    verdict = "PASS" if mean >= best and max(seconds) <= SECONDS_PER_SEED else "FAIL"
    print(
        f"ViT mean {mean:.2%} vs best baseline ({best_name}) {best:.2%}: ratio "
        f"{mean / best:.4f}; {verdict} against the goal of >= 1 within "
        f"{SECONDS_PER_SEED} s per seed"
    )
    if args.record and not args.quick:
        figures = {
            "steps": run.train["steps"],
            "seeds": list(seeds),
            "vit": accuracies,
            "small_cnn": cnn,
            "seconds_per_seed": [round(s, 1) for s in seconds],
            "baselines": {
                name: {"accuracy": value, "chosen_by_cv": str(params)}
                for name, (value, params) in results.items()
            },
        }
        path = record("vit_digits", figures)
        print(f"figures written to {path}")
    return mean, results


if __name__ == "__main__":
    main()
