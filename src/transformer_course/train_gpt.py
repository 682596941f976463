"""Chapter 6, Training a GPT from the command line: ``python -m transformer_course.train_gpt``.

Two subcommands::

    python -m transformer_course.train_gpt train --config baby --out runs/baby
    python -m transformer_course.train_gpt train --config baby --out runs/baby --resume
    python -m transformer_course.train_gpt sample --out runs/baby --prompt "ROMEO:"

``train`` trains a character-level :class:`~transformer_course.gpt.GPT` on tiny
Shakespeare (90 % for training, 10 % for validation, :func:`~transformer_course.data.split_ids`)
with the course's one loop, :func:`~transformer_course.train.fit`, and writes
into ``--out``:

* ``config.json``: the run (model and training settings) and the vocabulary,
  all that ``sample`` needs to rebuild the model and the tokenizer;
* ``checkpoint.pt``: fit's checkpoint, written atomically at each validation
  and at the end; ``--resume`` continues from it to exactly the result of a
  run that was never interrupted;
* ``metrics.jsonl``: one JSON object per line, ``{"step", "train_loss", "lr",
  "grad_norm"}`` for every step and ``{"step", "val_loss"}`` for every
  validation. Each line is appended and flushed as it is made, so an
  interrupted run leaves whole lines; ``--resume`` first rewrites the file
  (atomically) from the checkpoint's history, so no step appears twice.

Several processes (``torchrun``; see the README): every process runs the same
command; the process group is joined from the environment ``torchrun`` sets
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) with the ``nccl`` backend on GPUs and
``gloo`` on CPUs, each rank gets its share of every global batch, and
:func:`~transformer_course.train.fit` averages the gradients
(``DistributedDataParallel``). Rank 0 alone writes files and shows progress.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .data import load_text, split_ids, window_batches
from .gpt import GPT, GPTConfig, generate
from .runtime import THREADS_ENV, pick_device
from .tokens import CharTokenizer
from .train import (
    History,
    TrainConfig,
    cross_entropy_loss,
    fit,
    load_checkpoint,
    save_checkpoint,
)

__all__ = ["CONFIGS", "RunConfig", "load_run", "main", "parser"]

TEXT = "tinyshakespeare"
VAL_FRACTION = 0.1
CHECKPOINT, CONFIG_FILE, METRICS = "checkpoint.pt", "config.json", "metrics.jsonl"


@dataclass(frozen=True)
class RunConfig:
    """Chapter 6: a named training run: the model (less its vocabulary) and the loop."""

    model: dict[str, Any]  # GPTConfig fields, all but vocab_size
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig fields
    note: str = ""  # what the run is for, shown by --help


#: AdamW and its schedule as nanoGPT's small configs have them; every run
#: below uses them and sets the rest.
ADAMW = {
    "betas": (0.9, 0.99),
    "weight_decay": 0.1,
    "grad_clip": 1.0,
    "min_lr_ratio": 0.1,  # cosine decay to a tenth of the peak
}

#: The runs ``train --config NAME`` knows. ``batch_size`` is the global batch:
#: with several processes each takes an equal share of it.
CONFIGS: dict[str, RunConfig] = {
    # nanoGPT's CPU "baby" config (config/train_shakespeare_char.py with its
    # README's CPU settings), with rotary positions: validation loss about 1.79
    # after 2000 steps (benchmarks/gpt_quality.py; nanoGPT's about 1.88)
    "baby": RunConfig(
        model={
            "n_layers": 4,
            "n_heads": 4,
            "d_model": 128,
            "block_size": 64,
            "positions": "rope",  # chapter 5; nanoGPT's learned ones reach ~1.88
        },
        train={
            **ADAMW,
            "steps": 2000,
            "batch_size": 12,
            "lr": 1e-3,  # decays to 1e-4
            "warmup_steps": 100,
            "eval_every": 250,
            "eval_batches": 200,
        },
        note="nanoGPT's CPU config, about 3 minutes on 2 cores",
    ),
    # the baby's model with twice the context, twice the batch and a higher
    # learning rate: below the best n-gram model in about 10 minutes on 2 CPU
    # cores (benchmarks/gpt_quality.py)
    "long": RunConfig(
        model={
            "n_layers": 4,
            "n_heads": 4,
            "d_model": 128,
            "block_size": 128,
            "positions": "rope",
        },
        train={
            **ADAMW,
            "steps": 3000,
            "batch_size": 24,
            "lr": 3e-3,
            "warmup_steps": 150,
            "eval_every": 500,
            "eval_batches": 200,
        },
        note="below the best n-gram model, about 10 minutes on 2 CPU cores",
    ),
    # nanoGPT's GPU Shakespeare config (config/train_shakespeare_char.py): 6
    # layers, 6 heads, width 384, context 256, batch 64, dropout 0.2, 5,000
    # steps; nanoGPT's best validation loss 1.4697 in about 3 minutes on an
    # A100. Here with rotary positions, bfloat16 autocast and torch.compile
    # (benchmarks/on_gpu.py runs it and records the figure and the time)
    "gpu": RunConfig(
        model={
            "n_layers": 6,
            "n_heads": 6,
            "d_model": 384,
            "block_size": 256,
            "dropout": 0.2,
            "positions": "rope",
        },
        train={
            **ADAMW,
            "steps": 5000,
            "batch_size": 64,
            "lr": 1e-3,  # decays to 1e-4
            "warmup_steps": 100,
            "eval_every": 250,
            "eval_batches": 200,
            "autocast": "bfloat16",
            "compile": True,
        },
        note="nanoGPT's GPU config, for a CUDA GPU (minutes there, hours on a CPU)",
    ),
    # for tests: trains in seconds, learns little
    "tiny": RunConfig(
        model={"n_layers": 2, "n_heads": 2, "d_model": 32, "block_size": 32},
        train={
            **ADAMW,
            "steps": 20,
            "batch_size": 8,
            "lr": 3e-3,
            "warmup_steps": 4,
            "eval_every": 8,
            "eval_batches": 4,
        },
        note="seconds, for tests",
    ),
}


class UsageError(Exception):
    """A mistake in the command or its files; main prints it and exits with 1."""


# ---------------------------------------------------------------- the run's files


def _run_description(name: str, steps: int | None, seed: int) -> dict[str, Any]:
    """What defines the run and is saved in config.json (not the vocabulary)."""
    run = CONFIGS[name]
    train = dict(run.train, seed=seed)
    if steps is not None:
        train["steps"] = steps
        # a shorter run keeps the warm-up unless it would not fit
        if train["warmup_steps"] >= steps:
            train["warmup_steps"] = steps // 10
    TrainConfig(**train)  # checks the values now, with a clear message
    return {"config": name, "model": dict(run.model), "train": train}


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))  # tuples become lists, as when read back


def _write_json_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)  # atomic: the old file or the new, never half


def _rewrite_metrics(path: Path, records: list[dict[str, float]]) -> None:
    _write_json_atomically(path, "".join(json.dumps(r) + "\n" for r in records))


class _MetricsLog:
    """Appends one JSON line per record and flushes it: a crash leaves whole lines."""

    def __init__(self, path: Path):
        self.file = path.open("a", encoding="utf-8")

    def __call__(self, record: dict[str, float]) -> None:
        self.file.write(json.dumps(record) + "\n")  # one write per line
        self.file.flush()

    def close(self) -> None:
        self.file.close()


# ----------------------------------------------------------------- processes


def _distributed_env() -> tuple[int, int, int]:
    """(rank, local rank, world size) from torchrun's environment; (0, 0, 1) without."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 0, 1
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return rank, int(os.environ.get("LOCAL_RANK", rank)), world_size


def _set_threads(world_size: int, threads: int | None) -> None:
    """One process per core share: processes that share cores must not oversubscribe.

    ``--threads``, else ``TRANSFORMER_COURSE_THREADS``; else, with several
    processes on this machine, the cores divided among them (at least 1).
    """
    threads = threads or int(os.environ.get(THREADS_ENV, "0") or 0)
    if not threads and world_size > 1:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        threads = max(1, (os.cpu_count() or 1) // local)
    if threads:
        torch.set_num_threads(threads)


def _device(requested: str | None, local_rank: int, world_size: int) -> torch.device:
    device = pick_device(requested)
    if world_size > 1 and device.type == "cuda":
        device = torch.device("cuda", local_rank)  # one GPU per process
        torch.cuda.set_device(device)
    return device


# --------------------------------------------------------------------- train


def train(args: argparse.Namespace) -> int:
    """The ``train`` subcommand; returns the exit status."""
    out = Path(args.out)
    checkpoint, config_file, metrics = (
        out / CHECKPOINT,
        out / CONFIG_FILE,
        out / METRICS,
    )
    run = _run_description(args.config, args.steps, args.seed)
    if args.resume:
        if not checkpoint.is_file():
            raise UsageError(
                f"--resume: no checkpoint at {checkpoint}; train without --resume "
                f"to start a run there"
            )
        saved = json.loads(config_file.read_text(encoding="utf-8"))
        saved_run = {key: saved[key] for key in run}
        if saved_run != _as_json(run):
            differ = [key for key in run if saved_run[key] != _as_json(run[key])]
            raise UsageError(
                f"--resume: {out} holds another run ({', '.join(differ)} differ: "
                f"saved {[saved_run[k] for k in differ]}); resume with the same "
                f"--config, --steps and --seed, or choose another --out"
            )
    elif checkpoint.exists():
        raise UsageError(
            f"{checkpoint} exists: pass --resume to continue that run, or choose "
            f"another --out"
        )

    rank, local_rank, world_size = _distributed_env()
    _set_threads(world_size, args.threads)
    device = _device(args.device, local_rank, world_size)
    if world_size > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        text = load_text(TEXT)
        tokenizer = CharTokenizer(text)
        splits = split_ids(torch.tensor(tokenizer.encode(text)), VAL_FRACTION)
        model_config = GPTConfig(vocab_size=tokenizer.vocab_size, **run["model"])
        train_config = TrainConfig(
            **run["train"], device=str(device), checkpoint_path=checkpoint
        )
        get_batch = window_batches(
            splits,
            train_config.batch_size,
            model_config.block_size,
            seed=train_config.seed,
            rank=rank,
            world_size=world_size,
        )
        if args.interrupt_at is not None:  # hidden, for tests of --resume
            get_batch = _interrupted(get_batch, args.interrupt_at)
        torch.manual_seed(train_config.seed)  # the same initial weights on every rank
        model = GPT(model_config)

        log = None
        if rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            records = []
            if args.resume:  # the records up to the checkpoint, none after it
                history = History(**load_checkpoint(checkpoint)["history"])
                records = history.records()
            else:
                saved = {**_as_json(run), "vocab": "".join(tokenizer.chars)}
                saved["data"] = {"text": TEXT, "val_fraction": VAL_FRACTION}
                _write_json_atomically(config_file, json.dumps(saved, indent=1) + "\n")
            _rewrite_metrics(metrics, records)
            log = _MetricsLog(metrics)
            if not args.quiet:
                counts = model.parameter_count()
                print(
                    f"{args.config}: {counts['total']:,} parameters, "
                    f"{train_config.steps} steps of {train_config.batch_size} × "
                    f"{model_config.block_size} tokens on {device}"
                    + (f" × {world_size} processes" if world_size > 1 else ""),
                    file=sys.stderr,
                )
        try:
            history = fit(
                model,
                get_batch,
                cross_entropy_loss,
                train_config,
                progress=not args.quiet,
                resume=args.resume,
                on_record=log,
            )
        finally:
            if log is not None:
                log.close()
        if args.rank_states:  # hidden, for tests: every rank's final weights
            Path(args.rank_states).mkdir(parents=True, exist_ok=True)
            path = Path(args.rank_states) / f"rank{rank}.pt"
            save_checkpoint(path, {"model": model.state_dict(), "rank": rank})
        if rank == 0 and not args.quiet and history.val_losses:
            print(
                f"step {history.val_steps[-1] + 1}: validation loss "
                f"{history.val_losses[-1]:.4f}; checkpoint in {checkpoint}",
                file=sys.stderr,
            )
    finally:
        if world_size > 1:
            dist.destroy_process_group()
    return 0


def _interrupted(get_batch, step: int):
    """get_batch, but as if Ctrl-C were pressed when training step ``step`` starts."""

    def interrupted(split: str, k: int):
        if split == "train" and k == step:
            raise KeyboardInterrupt
        return get_batch(split, k)

    return interrupted


# -------------------------------------------------------------------- sample


def load_run(out: str | Path, device: str | torch.device = "cpu"):
    """Chapter 6: the trained model (in eval mode) and tokenizer of a ``train --out`` folder."""
    out = Path(out)
    checkpoint, config_file = out / CHECKPOINT, out / CONFIG_FILE
    for path in (checkpoint, config_file):
        if not path.is_file():
            raise UsageError(
                f"no {path.name} in {out}: train a model there first "
                f"(python -m transformer_course.train_gpt train --out {out} ...)"
            )
    saved = json.loads(config_file.read_text(encoding="utf-8"))
    tokenizer = CharTokenizer(saved["vocab"])  # the same sorted characters
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, **saved["model"]))
    model.load_state_dict(load_checkpoint(checkpoint)["model"])
    return model.to(device).eval(), tokenizer


def sample(args: argparse.Namespace) -> int:
    """The ``sample`` subcommand: print the prompt and its continuation."""
    device = pick_device(args.device)
    model, tokenizer = load_run(args.out, device)
    unknown = sorted(set(args.prompt) - set(tokenizer.chars))
    if unknown:
        raise UsageError(
            f"--prompt: {len(unknown)} character(s) are not in the vocabulary the "
            f"model was trained on: {', '.join(map(repr, unknown))}"
        )
    if not args.prompt:
        raise UsageError("--prompt: expected at least one character")
    ids = torch.tensor([tokenizer.encode(args.prompt)], device=device)  # (1, N)
    generator = torch.Generator(device).manual_seed(args.seed)
    ids = generate(
        model,
        ids,
        args.tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        use_cache=not args.no_cache,
        generator=generator,
    )
    sys.stdout.write(tokenizer.decode(ids[0].tolist()) + "\n")
    return 0


# ---------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    """The command line: ``train`` and ``sample``."""
    top = argparse.ArgumentParser(
        prog="python -m transformer_course.train_gpt",
        description="Train a character-level GPT on tiny Shakespeare, or sample one.",
    )
    commands = top.add_subparsers(dest="command", required=True)

    configs = ", ".join(f"{name} ({run.note})" for name, run in CONFIGS.items())
    t = commands.add_parser("train", help="train (or resume) a run")
    t.add_argument("--config", required=True, choices=CONFIGS, help=configs)
    t.add_argument("--out", required=True, help="folder for the run's files")
    t.add_argument("--steps", type=int, help="override the config's steps")
    t.add_argument("--device", help="cpu, cuda or mps (default: CUDA if any)")
    t.add_argument("--resume", action="store_true", help="continue from --out")
    t.add_argument("--seed", type=int, default=0, help="data order and weights")
    t.add_argument("--threads", type=int, help="PyTorch threads per process")
    t.add_argument("--quiet", action="store_true", help="no progress bar or messages")
    # hidden, for tests: save each rank's final weights; stop as if interrupted
    t.add_argument("--rank-states", help=argparse.SUPPRESS)
    t.add_argument("--interrupt-at", type=int, help=argparse.SUPPRESS)
    t.set_defaults(run=train)

    s = commands.add_parser("sample", help="generate text from a trained run")
    s.add_argument("--out", required=True, help="the folder `train` wrote")
    s.add_argument("--prompt", default="\n", help="text to continue (default: newline)")
    s.add_argument("--tokens", type=int, default=500, help="characters to generate")
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--top-k", type=int, default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--device", help="cpu, cuda or mps (default: CUDA if any)")
    s.add_argument("--no-cache", action="store_true", help="recompute every step")
    s.set_defaults(run=sample)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Chapter 6: run the command line; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, ValueError, FileNotFoundError) as err:
        print(f"train_gpt {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        hint = "; continue with --resume" if args.command == "train" else ""
        print(f"train_gpt {args.command}: interrupted{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
