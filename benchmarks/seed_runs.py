"""The command line the benchmarks that record figures over seeds share
(vit_digits, vit_ablations, warmup_digits, position_lag): ``--quick``,
``--seeds``, ``--threads`` and ``--record``."""

from __future__ import annotations

import argparse

import torch


def parse_seed_run(doc: str, name: str, chapter: int, seeds: int, argv=None):
    """The parsed options of ``benchmarks/<name>.py``, with torch's threads set
    (one for ``--quick``). ``--record`` writes the figures into the package,
    ``transformer_course/recorded/<name>.json``, where chapter ``chapter`` reads
    them."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps, one seed")
    parser.add_argument("--seeds", type=int, default=seeds)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--record",
        action="store_true",
        help="write the figures into the package (transformer_course/recorded/"
        f"{name}.json), where chapter {chapter} reads them",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1 if args.quick else args.threads)
    return args
