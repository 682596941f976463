"""Generation time with the KV cache against recomputing every step (chapter 6).

``tc.generate(..., use_cache=True)`` keeps each layer's keys and values and
feeds the model one new token per step; ``use_cache=False`` feeds it the whole
sequence again each step, as the N − 1 separate passes of Turner §4.1. Both
run greedily (temperature 0) from the same prompt with the same weights, so
they must give the same tokens; the script checks that, then times them in
alternation in one process. Goal (issue 13): at 6 layers, width 384, context
256 and 255 new tokens, the cached generation is at least 5× faster.

    python benchmarks/kv_cache.py            # the issue's size, CUDA if available
    python benchmarks/kv_cache.py --quick    # tiny sizes, a smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see gpt_quality.py

import torch

import transformer_course as tc

GOAL = 5.0


def timed(model, prompt, new_tokens, use_cache, device) -> tuple[float, torch.Tensor]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    ids = tc.generate(model, prompt, new_tokens, temperature=0, use_cache=use_cache)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, ids


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke test")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default=None, help="default: cuda if available")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(
        args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    )
    if args.quick:
        layers, width, heads, context, repeat = 2, 32, 2, 32, 1
    else:
        layers, width, heads, context, repeat = 6, 384, 6, 256, args.repeat
    new_tokens = context - 1  # a one-token prompt grows to fill the context
    torch.manual_seed(0)
    config = tc.GPTConfig(
        vocab_size=65,
        block_size=context,
        n_layers=layers,
        n_heads=heads,
        d_model=width,
        positions="rope",
    )
    model = tc.GPT(config).to(device).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    print(
        f"torch {torch.__version__} on {device}, {torch.get_num_threads()} thread(s); "
        f"{layers} layers, width {width}, {heads} heads, context {context}, "
        f"{new_tokens} new tokens, greedy"
    )
    timed(model, prompt, 4, True, device)  # warm up both paths
    timed(model, prompt, 4, False, device)
    times = {"cache": [], "recompute": []}
    for _ in range(repeat):  # alternate, so that machine noise hits both alike
        seconds, cached = timed(model, prompt, new_tokens, True, device)
        times["cache"].append(seconds)
        seconds, recomputed = timed(model, prompt, new_tokens, False, device)
        times["recompute"].append(seconds)
        if not torch.equal(cached, recomputed):
            first = int((cached != recomputed).nonzero()[0, 1])
            raise SystemExit(f"the tokens differ, first at position {first}")
    cache, recompute = (statistics.median(times[k]) for k in ("cache", "recompute"))
    print(f"identical tokens: yes ({cached.shape[1]} in all)")
    print(f"with the cache:   {cache:.3f} s ({1e3 * cache / new_tokens:.1f} ms/token)")
    print(
        f"recomputing:      {recompute:.3f} s ({1e3 * recompute / new_tokens:.1f} "
        "ms/token)"
    )
    ratio = recompute / cache
    verdict = "PASS" if ratio >= GOAL else "FAIL"
    print(f"speed-up ratio {ratio:.2f}x: {verdict} against the goal of >= {GOAL:g}x")
    return ratio


if __name__ == "__main__":
    main()
