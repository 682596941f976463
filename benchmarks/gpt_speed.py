"""Training-step time: tc.GPT against the same model built from nn.TransformerEncoderLayer.

The reference has the same embeddings, positions, tied head and sizes, and
its blocks are ``nn.TransformerEncoderLayer(norm_first=True, batch_first=True,
activation="gelu", dropout=0)`` with torch's causal mask, holding our weights
(copied with ``tc.torch_layers.to_torch``); the two give the same logits, which the
script checks before timing. Each step is forward, cross-entropy, backward and
an AdamW update on the same batch; the two models alternate step by step in
one process, so that machine noise hits both alike. Goal (issue 13): median
time ratio ours/torch ≤ 1.0, on the CPU and on a GPU when there is one.

    python benchmarks/gpt_speed.py            # two sizes, CUDA if available
    python benchmarks/gpt_speed.py --quick    # tiny sizes, a smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see gpt_quality.py

import torch
import torch.nn.functional as F
from torch import nn

import transformer_course as tc
from transformer_course.torch_layers import to_torch


class TorchGPT(nn.Module):
    """Our GPT's architecture from PyTorch's own layers, with our GPT's weights."""

    def __init__(self, ours: tc.GPT):
        super().__init__()
        c = ours.config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.position_embedding = nn.Embedding(c.block_size, c.d_model)
        self.layers = nn.ModuleList(to_torch(block) for block in ours.blocks.blocks)
        self.final_norm = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.token_embedding.load_state_dict(ours.token_embedding.state_dict())
        self.position_embedding.weight = nn.Parameter(
            ours.positions.weight.detach().clone()
        )
        self.final_norm.load_state_dict(ours.blocks.final_norm.state_dict())
        self.head.weight = self.token_embedding.weight  # tied, as ours
        self.register_buffer(
            "causal_mask",
            nn.Transformer.generate_square_subsequent_mask(c.block_size),
            persistent=False,
        )  # (T, T): 0 on and below the diagonal, −inf above

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        N = ids.shape[1]
        positions = torch.arange(N, device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)  # (B, N, D)
        mask = self.causal_mask[:N, :N]
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)  # (B, N, D)
        return self.head(self.final_norm(x))  # (B, N, V)


def step(model, optimizer, inputs, targets) -> None:
    logits = model(inputs)  # (B, N, V)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def measure(B, N, D, H, L, repeat, device):
    torch.manual_seed(0)
    V = 65
    ours = tc.GPT(
        tc.GPTConfig(vocab_size=V, block_size=N, n_layers=L, n_heads=H, d_model=D)
    ).to(device)
    reference = TorchGPT(ours).to(device)
    inputs = torch.randint(V, (B, N), device=device)
    targets = torch.randint(V, (B, N), device=device)
    with torch.no_grad():  # the same model: the same logits
        torch.testing.assert_close(
            ours(inputs), reference(inputs), rtol=1e-4, atol=1e-4
        )
    models = {"ours": ours, "torch": reference}
    optimizers = {
        name: torch.optim.AdamW(model.parameters(), lr=1e-4)
        for name, model in models.items()
    }
    for _ in range(3):  # warm up both
        for name, model in models.items():
            step(model, optimizers[name], inputs, targets)
    times = {name: [] for name in models}
    for _ in range(repeat):  # alternate, so that machine noise hits both alike
        for name, model in models.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step(model, optimizers[name], inputs, targets)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return times


def spread(times) -> str:
    """The median and the interquartile range, in ms."""
    q1, median, q3 = statistics.quantiles(times, n=4)
    return f"{1e3 * median:7.1f} [{1e3 * q1:.1f}-{1e3 * q3:.1f}]"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke test")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--device", default=None, help="default: cuda if available")
    args = parser.parse_args(argv)
    torch.set_num_threads(1 if args.quick else args.threads)
    device = torch.device(
        args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    )
    # (B, N, D, H, L): nanoGPT's "baby" config, and a wider, longer one
    configs = (
        [(2, 16, 32, 4, 2)]
        if args.quick
        else [(12, 64, 128, 4, 4), (8, 256, 256, 8, 4)]
    )
    repeat = 3 if args.quick else args.repeat
    print(
        f"torch {torch.__version__}, {device}, {torch.get_num_threads()} thread(s); "
        f"training step (forward, loss, backward, AdamW), median [IQR] of {repeat}"
    )
    print(
        f"{'B':>3} {'N':>4} {'D':>4} {'H':>2} {'L':>2} | {'ours ms':>22} | "
        f"{'torch ms':>22} | {'time ratio':>10}"
    )
    ratios = []
    for B, N, D, H, L in configs:
        times = measure(B, N, D, H, L, repeat, device)
        ratio = statistics.median(times["ours"]) / statistics.median(times["torch"])
        ratios.append(ratio)
        print(
            f"{B:>3} {N:>4} {D:>4} {H:>2} {L:>2} | {spread(times['ours']):>22} | "
            f"{spread(times['torch']):>22} | {ratio:>10.3f}"
        )
    verdict = "meets" if max(ratios) <= 1.0 else "misses"
    print(f"worst time ratio {max(ratios):.3f}: {verdict} the goal of <= 1.0")
    return ratios


if __name__ == "__main__":
    main()
