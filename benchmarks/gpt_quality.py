"""Validation loss of tc.GPT on tiny Shakespeare, against nanoGPT and n-gram baselines.

Character-level tiny Shakespeare, ``tc.split_ids(ids, val_fraction=0.1)``
(the first 90 % for training, the rest for validation, as nanoGPT's), trained
with the course's loop ``tc.fit`` from the training command line's named
configs (``transformer_course.train_gpt.CONFIGS``) (issue 13). Two validation
losses: the mean over random windows (``tc.evaluate``, nanoGPT's measure, in
which the first targets of a window see little context) and the whole
validation text, every character scored once with at least half a context
before it (``tc.sequence_cross_entropy``, the n-gram models' measure).

* ``baby``: nanoGPT's CPU config (4 layers, 4 heads, width 128, context 64,
  batch 12, 2000 steps, AdamW lr 1e-3, warm-up 100, cosine decay to 1e-4,
  betas (0.9, 0.99), weight decay 0.1, clip 1.0, no dropout) with rotary
  positions (chapter 5). nanoGPT reports about 1.88 for it; goal: ≤ 1.85.
* ``baby-learned``: the same with learned absolute positions, nanoGPT's own
  model: the like-for-like comparison with its 1.88.
* ``long``: trained for at most 10 minutes on 2 CPU cores; goal: below the
  best count-based n-gram model (``tc.ngram``, interpolated Kneser–Ney,
  orders 0-8) fitted on the same training split, on the same validation text.

    python benchmarks/gpt_quality.py                 # all three, about 17 minutes
    python benchmarks/gpt_quality.py --config long   # one of them
    python benchmarks/gpt_quality.py --quick         # a few steps of each
    python benchmarks/gpt_quality.py --config long --json long.json   # and a record
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

# threads that wait sleep instead of spinning: on 2 cores shared with other
# processes, spinning OpenMP threads made torch 10-20x slower (TOOLING.md)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import transformer_course as tc
from transformer_course.ngram import NGramModel, select_order
from transformer_course.train import cross_entropy_loss, evaluate
from transformer_course.train_gpt import CONFIGS, RunConfig

NANOGPT_BABY = 1.88  # nanoGPT's README, the same config on CPU
BABY_GOAL = 1.85
LONG_SECONDS = 600  # the long run's budget: 10 minutes of training


#: The benchmark's runs: the training command line's named configs
#: (``python -m transformer_course.train_gpt train --config NAME``), and the
#: baby with nanoGPT's own learned positions.
RUNS = {
    "baby": CONFIGS["baby"],
    "baby-learned": replace(
        CONFIGS["baby"], model={**CONFIGS["baby"].model, "positions": "learned"}
    ),
    "long": CONFIGS["long"],
}


def corpus():
    """Token ids of tiny Shakespeare split 90/10, and the vocabulary size."""
    text = tc.load_text()
    tokenizer = tc.CharTokenizer(text)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.int64)
    return tc.split_ids(ids, val_fraction=0.1), tokenizer.vocab_size


def train(run: RunConfig, splits, vocab_size: int, seed: int = 0):
    """Train a GPT as ``run`` says; return (val losses, seconds of training, steps/s).

    The val losses: ``"windows"``, the mean over ``eval_batches`` random
    windows (nanoGPT's measure), and ``"text"``, every character of the
    validation split scored once with at least half a context before it
    (``tc.sequence_cross_entropy``), the measure of the n-gram models.
    """
    torch.manual_seed(seed)
    model = tc.GPT(tc.GPTConfig(vocab_size=vocab_size, **run.model))
    settings = {**run.train, "eval_every": None, "seed": seed, "device": "cpu"}
    config = tc.TrainConfig(**settings)  # validated once, below
    block_size = run.model["block_size"]
    get_batch = tc.window_batches(splits, config.batch_size, block_size, seed=seed)
    start = time.perf_counter()
    tc.fit(model, get_batch, cross_entropy_loss, config, progress=False)
    seconds = time.perf_counter() - start
    losses = {
        "windows": evaluate(model, get_batch, cross_entropy_loss, config.eval_batches),
        "text": tc.sequence_cross_entropy(model, splits["val"]),
    }
    return losses, seconds, config.steps / seconds


def best_ngram(splits, vocab_size: int, orders):
    """Validation cross-entropy of every order, and the order chosen on train alone."""
    chosen, _ = select_order(splits["train"], vocab_size, orders)
    table = {
        n: NGramModel(n, vocab_size).fit(splits["train"]).cross_entropy(splits["val"])
        for n in orders
    }
    return table, chosen


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps of each")
    parser.add_argument("--config", choices=[*RUNS, "all"], default="all")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1 if args.quick else args.threads)
    names = list(RUNS) if args.config == "all" else [args.config]
    splits, V = corpus()
    orders = range(4) if args.quick else range(9)
    if args.quick:  # a smoke test: score the first 4,096 validation characters only
        splits = {**splits, "val": splits["val"][:4096]}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"tiny Shakespeare, {len(splits['train']):,} train / "
        f"{len(splits['val']):,} val characters, V = {V}"
    )
    results = {}
    record = {"quick": args.quick, "runs": {}}
    for name in names:
        run = RUNS[name]
        if args.quick:
            quick = {"steps": 3, "warmup_steps": 1, "eval_batches": 2}
            run = replace(run, train={**run.train, **quick})
        losses, seconds, rate = train(run, splits, V)
        results[name] = losses
        record["runs"][name] = {
            "model": run.model,
            "train": run.train,
            "val_loss_windows": losses["windows"],
            "val_loss_text": losses["text"],
            "training_seconds": seconds,
        }
        model, settings = run.model, run.train
        print(
            f"{name}: {model['n_layers']} layers, width {model['d_model']}, context "
            f"{model['block_size']}, batch {settings['batch_size']}, "
            f"{model['positions']} positions, {settings['steps']} steps in "
            f"{seconds:.0f} s ({1e3 / rate:.0f} ms/step): val loss "
            f"{losses['windows']:.4f} ({settings['eval_batches']} random windows), "
            f"{losses['text']:.4f} (the whole validation text)"
        )
        if name == "long":
            minutes = "within" if seconds <= LONG_SECONDS else "OVER"
            print(f"long: trained in {seconds:.0f} s, {minutes} the 10-minute budget")
    if "baby" in results:
        baby = results["baby"]["windows"]  # nanoGPT's measure
        verdict = "PASS" if baby <= BABY_GOAL else "FAIL"
        print(
            f"baby val loss {baby:.4f} (nanoGPT about {NANOGPT_BABY}): "
            f"{verdict} against the goal of <= {BABY_GOAL}"
        )
    if "baby-learned" in results:
        print(
            f"baby with learned positions, nanoGPT's own model: val loss "
            f"{results['baby-learned']['windows']:.4f} (nanoGPT about {NANOGPT_BABY})"
        )
    if "long" in results:
        start = time.perf_counter()
        table, chosen = best_ngram(splits, V, orders)
        best = min(table, key=table.get)
        print(
            "n-gram (interpolated Kneser-Ney) val cross-entropy by order: "
            + ", ".join(f"{n}: {ce:.4f}" for n, ce in table.items())
            + f" ({time.perf_counter() - start:.0f} s)"
        )
        print(
            f"order chosen on a held-out tail of train: {chosen} "
            f"(val {table[chosen]:.4f}); best on val: {best} (val {table[best]:.4f})"
        )
        record["ngram"] = {
            "val_loss_by_order": {str(n): ce for n, ce in table.items()},
            "order_chosen_on_train": chosen,
            "order_best_on_val": best,
        }
        long = results["long"]["text"]  # the n-grams' measure: the whole text
        ratio = long / table[best]
        verdict = "PASS" if ratio < 1 else "FAIL"
        print(
            f"long val loss {long:.4f} on the whole validation text vs best n-gram "
            f"{table[best]:.4f}: "
            f"ratio {ratio:.3f}, {verdict} against the goal of < 1"
        )
    if args.json:
        meta = {"torch": torch.__version__, "threads": torch.get_num_threads()}
        args.json.write_text(
            json.dumps({**meta, **record}, indent=1) + "\n", encoding="utf-8"
        )
    return results


if __name__ == "__main__":
    main()
