"""Forward+backward time and peak memory: tc.MultiHeadAttention vs nn.MultiheadAttention.

Both run on the same inputs with the same weights (copied with
``tc.torch_layers.to_torch``), in the same process, alternating, so the ratio is
fair on a shared machine. Goal (issue 6): time ratio ≤ 1.05.

    python benchmarks/multihead_attention.py            # the two configurations
    python benchmarks/multihead_attention.py --quick    # tiny sizes, a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import transformer_course as tc
from transformer_course.benchmark import peak_memory
from transformer_course.torch_layers import to_torch


def step(module, x, upstream, reference: bool) -> None:
    x.grad = None
    out = module(x, x, x, need_weights=False)[0] if reference else module(x)
    out.backward(
        upstream
    )  # a dense upstream gradient (not .sum(): that is a slow path)


def measure(B, N, D, H, repeat, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    ours = tc.MultiHeadAttention(D, H)
    reference = to_torch(ours)
    x = torch.randn(B, N, D, requires_grad=True)
    upstream = torch.randn(B, N, D)
    for _ in range(2):  # warm up both
        step(ours, x, upstream, False)
        step(reference, x, upstream, True)
    times = {"ours": [], "torch": []}
    for _ in range(repeat):  # alternate, so that machine noise hits both alike
        for name, module, is_ref in [("ours", ours, False), ("torch", reference, True)]:
            start = time.perf_counter()
            step(module, x, upstream, is_ref)
            times[name].append(time.perf_counter() - start)
    memory = {
        "ours": peak_memory(lambda: step(ours, x, upstream, False)),
        "torch": peak_memory(lambda: step(reference, x, upstream, True)),
    }
    return {name: statistics.median(t) for name, t in times.items()}, memory


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (a smoke test)"
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    configs = [(2, 16, 32, 4)] if args.quick else [(8, 256, 256, 8), (8, 1024, 256, 8)]
    repeat = 2 if args.quick else args.repeat
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), median of {repeat}, forward+backward"
    )
    print(
        f"{'B':>3} {'N':>5} {'D':>4} {'H':>2} | {'ours ms':>8} {'torch ms':>8} {'time ratio':>10} | "
        f"{'ours MiB':>8} {'torch MiB':>9} {'mem ratio':>9}"
    )
    ratios = []
    for B, N, D, H in configs:
        times, memory = measure(B, N, D, H, repeat, args.threads)
        ratio = times["ours"] / times["torch"]
        ratios.append(ratio)
        print(
            f"{B:>3} {N:>5} {D:>4} {H:>2} | {1e3 * times['ours']:>8.1f} {1e3 * times['torch']:>8.1f} "
            f"{ratio:>10.3f} | {memory['ours'] / 2**20:>8.1f} {memory['torch'] / 2**20:>9.1f} "
            f"{memory['ours'] / memory['torch']:>9.3f}"
        )
    verdict = "meets" if max(ratios) <= 1.05 else "misses"
    print(f"worst time ratio {max(ratios):.3f}: {verdict} the goal of <= 1.05")
    return ratios


if __name__ == "__main__":
    main()
