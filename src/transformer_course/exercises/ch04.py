"""Checks and quizzes for exercises/04_block.ipynb (chapter 4, The transformer block).

The references are the course's own :func:`~transformer_course.norms.layer_norm`,
:class:`~transformer_course.block.MLP` and :class:`~transformer_course.block.Block`
(pre-norm and post-norm), loaded with the weights each check makes. The hints
name the usual mistakes: the unbiased variance, ε outside the square root, the
wrong axis (BatchNorm's), γ and β forgotten or swapped; no activation, or one
after the second layer, transposed weights; post-norm for pre-norm and back, a
missing residual, the residual around the normalised input, one norm used twice;
and, in the parameter count, the biases, the norms, the output projection.
"""

from __future__ import annotations

import torch

from ..block import MLP, Block, BlockConfig
from ..multihead import split_heads
from ..norms import layer_norm as _layer_norm
from .core import (
    PROPERTY,
    Check,
    Exercise,
    Failed,
    close,
    each_value,
    returned_values,
    seeded_randn,
    unseen_check,
)
from .table import Raised, Returns, Table, WrongShape
from .twins import loud_score_scale, one_size_at_a_time, other_divisor, resized
from .widgets import load_quizzes

__all__ = ["EXERCISES", "GIVEN", "GIVEN_CELL", "QUIZZES"]


#: The notebook's locked "given" cell above pre_norm_block: chapter 3's
#: multi-head self-attention, written out. The grader runs no locked cell, so it
#: runs this text after its preamble (:data:`..grading.grade.PREAMBLE`): a
#: kernel and the grader then define ``self_attention`` alike, whatever the
#: learner's cells do (a learner's own definition still wins, in both).
#: tests/test_exercises_ch04.py checks that the notebooks' cell is this text.
GIVEN_CELL = "given_self_attention"  # the nbgrader id of the cell that holds it
GIVEN = '''\
# Given, and locked: read it and run it (it cannot be edited or deleted).
def self_attention(h, params, n_heads):
    """Given: chapter 3's multi-head self-attention with the block's weights.
    h (B, N, D) -> (B, N, D)."""
    B, N, D = h.shape
    qkv = h @ params["attn.qkv_proj.weight"].T + params["attn.qkv_proj.bias"]
    q, k, v = (  # 3 x (B, H, N, d)
        t.view(B, N, n_heads, D // n_heads).transpose(1, 2) for t in qkv.chunk(3, -1)
    )
    weights = torch.softmax(q @ k.transpose(-2, -1) / (D // n_heads) ** 0.5, dim=-1)
    heads = (weights @ v).transpose(1, 2).reshape(B, N, D)  # (B, N, D)
    return heads @ params["attn.out_proj.weight"].T + params["attn.out_proj.bias"]
'''


# --- Exercise 1: LayerNorm from scratch -----------------------------------------------


def _normalised(x, eps, dims=(-1,), unbiased=False, eps_outside=False):
    """x̂ over ``dims``; the mistakes by their flags."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    std = var.sqrt() + eps if eps_outside else (var + eps).sqrt()
    return (x - mean) / std


def _ln_cases():
    x = seeded_randn(2, 3, 8)
    x[0, 1] = 3.0  # a constant token: its output is β
    return [
        (x, 1 + seeded_randn(8, seed=1) / 2, seeded_randn(8, seed=2), 1e-5),
        (
            3 * seeded_randn(4, 5, seed=3) + 2,
            seeded_randn(5, seed=4),
            seeded_randn(5, seed=5),
            0.5,
        ),
        (
            seeded_randn(2, 2, 3, 4, seed=6),
            seeded_randn(4, seed=7),
            seeded_randn(4, seed=8),
            0.1,
        ),
    ]


def _affine(x_hat, gamma, beta):
    return x_hat * gamma + beta


def _other_axes(x, gamma, beta, eps=1e-5):
    """LayerNorm's statistics over other axes than a token's features."""
    axes = [(d,) for d in range(x.dim() - 1)]
    axes += [tuple(range(x.dim() - 1)), tuple(range(x.dim()))]
    return [_affine(_normalised(x, eps, dims), gamma, beta) for dims in axes]


def _cancelling(x, gamma, beta, eps=1e-5):
    """The variance as E[x²] − E[x]², in x's dtype (not a mistake in float64)."""
    if x.dtype == torch.float64:
        return None
    mean = x.mean(-1, keepdim=True)
    variance = (x * x).mean(-1, keepdim=True) - mean * mean
    return _affine((x - mean) / torch.sqrt(variance + eps), gamma, beta)


def _x_hat(x, eps):
    return _normalised(x, eps)


LN_TABLE = Table(
    reference=_layer_norm,
    case_by_case=True,
    rows=(
        WrongShape.of_input("(..., D)"),
        Returns(
            lambda x, g, b, eps=1e-5: _affine(_normalised(x, eps, unbiased=True), g, b),
            "Use the biased variance, the mean of (x − mean)² over the D features (1/D): "
            "x.var(dim=-1, unbiased=False). torch's x.var() divides by D − 1.",
        ),
        Returns(
            lambda x, g, b, eps=1e-5: _affine(
                _normalised(x, eps, eps_outside=True), g, b
            ),
            "Add ε to the variance, inside the square root: (x − mean) / √(var + ε), "
            "not (x − mean) / (√var + ε).",
        ),
        Returns(
            _other_axes,
            "Normalise each token over its own D features (dim=-1), not over the "
            "tokens or the batch: that would be BatchNorm's statistics.",
        ),
        Returns(
            _cancelling,
            lambda case, got, want: (
                "Compute the variance as the mean of (x − mean)²: as E[x²] − E[x]² "
                "the two terms nearly cancel when a token's mean is large next to "
                f"its spread (here about {float(case[0].mean(-1).abs().max()):.0f}), "
                "and float32 keeps only the rounding error."
            ),
            equal_nan=True,
        ),
        Returns(
            lambda x, g, b, eps=1e-5: _x_hat(x, eps),
            "Apply the learned gain and shift: γ ⊙ x̂ + β.",
        ),
        Returns(
            lambda x, g, b, eps=1e-5: _x_hat(x, eps) * g,
            "Add β after scaling by γ: γ ⊙ x̂ + β.",
        ),
        Returns(
            lambda x, g, b, eps=1e-5: _x_hat(x, eps) + b,
            "Multiply by γ before adding β: γ ⊙ x̂ + β.",
        ),
        Returns(
            lambda x, g, b, eps=1e-5: [
                _x_hat(x, eps) * b + g,
                (_x_hat(x, eps) + b) * g,
            ],
            "γ (gamma) multiplies x̂ and β (beta) is added after: γ ⊙ x̂ + β.",
        ),
    ),
    otherwise="x̂ = (x − mean) / √(var + ε), mean and (1/D) variance over the last "
    "dimension of each token, then γ ⊙ x̂ + β; compare with F.layer_norm.",
)


def _standard_cases():
    ones, zeros = torch.ones(6), torch.zeros(6)
    return [
        (5 * seeded_randn(3, 4, 6, seed=9) - 1, ones, zeros, 1e-5),
        (seeded_randn(7, 6, seed=10) + torch.arange(6.0), ones, zeros, 1e-5),
    ]


def _judge_standard(cases, outcomes):
    for (x, *_), got in each_value(cases, outcomes):
        if got.shape != x.shape:
            raise Failed(f"The output has the input's shape {tuple(x.shape)}.")
        mean, var = got.mean(-1), got.var(-1, unbiased=False)
        if not (
            close(mean, torch.zeros_like(mean), atol=1e-4)
            and close(var, torch.ones_like(var), atol=1e-3)
        ):
            raise Failed(
                "With γ = 1 and β = 0, every token (each row over the last dimension) "
                "must have mean 0 and variance 1 (the 1/D variance)."
            )


def _token_cases():
    x = seeded_randn(2, 5, 6, seed=11)
    changed = x.clone()
    changed[:, 1:] = seeded_randn(2, 4, 6, seed=12) * 10
    changed[1] = seeded_randn(5, 6, seed=13)
    gamma, beta = seeded_randn(6, seed=14), seeded_randn(6, seed=15)
    return [(x, gamma, beta, 1e-5), (changed, gamma, beta, 1e-5)]


def _judge_token(cases, outcomes):
    first, changed = returned_values(outcomes)
    if first.shape != cases[0][0].shape or changed.shape != first.shape:
        raise Failed("The output has the input's shape (..., D).")
    if not close(first[0, 0], changed[0, 0]):
        raise Failed(
            "A token's output must depend on that token's features only: changing "
            "the other tokens, or the other sequences in the batch, must not change "
            "it. Take the mean and variance over dim=-1 (LayerNorm, not BatchNorm)."
        )


def _random_ln(g):
    cases = []
    for eps in (1e-5, 0.1, 1.0):
        leading = torch.randint(
            1, 5, (int(torch.randint(1, 4, (), generator=g)),), generator=g
        )
        D = int(torch.randint(2, 17, (), generator=g))
        scale, shift = (
            1 + 4 * torch.rand((), generator=g),
            3 * torch.randn((), generator=g),
        )
        x = scale * torch.randn(*leading.tolist(), D, generator=g) + shift
        # a constant token (variance exactly 0, so its value is a whole number:
        # only ε keeps the division finite)
        row = int(torch.randint(0, x.numel() // D, (), generator=g))
        x.view(-1, D)[row] = float(torch.randint(-3, 4, (), generator=g))
        gamma, beta = torch.randn(D, generator=g), torch.randn(D, generator=g)
        cases.append((x, gamma, beta, eps))
    # and the default ε, 1e-5, left out (on small values, where ε matters)
    D = int(torch.randint(2, 9, (), generator=g))
    x = 0.01 * torch.randn(3, D, generator=g)
    cases.append((x, torch.randn(D, generator=g), torch.randn(D, generator=g)))
    # and tokens whose mean is far from 0 next to their spread (128 to 384, a
    # spread of about 1): the variance as E[x²] − E[x]² cancels there, and
    # float32 keeps its rounding error. The values are multiples of 1/16 and D
    # a power of 2, so that mean((x − mean)²) is exact in float32 whatever the
    # order of its operations: an honest answer is never at the tolerance's edge.
    D = 2 ** int(torch.randint(2, 5, (), generator=g))
    offset = 128.0 * int(torch.randint(1, 4, (), generator=g))
    x = offset + torch.randint(-32, 33, (2, 3, D), generator=g) / 16
    cases.append((x, torch.randn(D, generator=g), torch.randn(D, generator=g), 1e-5))
    return cases


LAYER_NORM = Exercise(
    "layer_norm",
    "layer_norm",
    "Exercise 1: LayerNorm from scratch",
    4,
    (
        Check("equals F.layer_norm, for any ε", _ln_cases, LN_TABLE),
        unseen_check("the same on unseen inputs", _random_ln, LN_TABLE),
        Check(
            "with γ = 1, β = 0: each token has mean 0, variance 1",
            _standard_cases,
            _judge_standard,
            PROPERTY,
        ),
        Check(
            "a token's output ignores the other tokens",
            _token_cases,
            _judge_token,
            PROPERTY,
        ),
    ),
    forbidden=("layer_norm",),
)

# --- Exercise 2: the MLP, token by token ---------------------------------------------


def _reference_mlp(x, W1, b1, W2, b2):
    with torch.random.fork_rng(devices=[]):
        module = MLP(x.shape[-1], W1.shape[0], activation="relu")
    with torch.no_grad():
        module.up_proj.weight.copy_(W1)
        module.up_proj.bias.copy_(b1)
        module.down_proj.weight.copy_(W2)
        module.down_proj.bias.copy_(b2)
        return module(x)


def _mlp_weights(D, d_mlp, g=None, seed=0):
    def draw(*shape, k):
        if g is not None:
            return torch.randn(*shape, generator=g)
        return seeded_randn(*shape, seed=seed + k)

    return (
        draw(d_mlp, D, k=0) / D**0.5,
        draw(d_mlp, k=1) / 2,
        draw(D, d_mlp, k=2) / d_mlp**0.5,
        draw(D, k=3) / 2,
    )


def _mlp_cases():
    return [
        (seeded_randn(3, 4, seed=20), *_mlp_weights(4, 4, seed=21)),  # d_mlp = D
        (seeded_randn(2, 5, 6, seed=30), *_mlp_weights(6, 24, seed=31)),
        (seeded_randn(1, 3, 8, seed=40), *_mlp_weights(8, 5, seed=41)),
    ]


UNTRANSPOSED = (
    "W1 (d_mlp, D) and W2 (D, d_mlp) are stored as nn.Linear stores its "
    "weight, (out, in): multiply by the transpose, x @ W1.T + b1."
)


def _hidden(x, W1, b1):
    return x @ W1.T + b1  # (..., d_mlp)


MLP_TABLE = Table(
    reference=_reference_mlp,
    case_by_case=True,
    rows=(
        Raised(("shapes cannot be multiplied", "size mismatch"), UNTRANSPOSED),
        WrongShape.of_input("(..., D)"),
        Returns(
            lambda x, W1, b1, W2, b2: _hidden(x, W1, b1) @ W2.T + b2,
            "Apply the ReLU to the hidden layer: without it the two linear layers "
            "collapse into one linear map.",
        ),
        Returns(
            lambda x, W1, b1, W2, b2: [
                torch.relu(_hidden(x, W1, b1) @ W2.T + b2),
                torch.relu(torch.relu(_hidden(x, W1, b1)) @ W2.T + b2),
            ],
            "The ReLU goes between the two layers, on the d_mlp hidden features, "
            "not on the output: the MLP's output (added to the residual stream) "
            "may be negative.",
        ),
        Returns(
            lambda x, W1, b1, W2, b2: (
                torch.relu(x @ W1 + b1) @ W2 + b2
                if W1.shape[0] == W1.shape[1]
                else None
            ),
            "W1 and W2 are stored as nn.Linear stores its weight, (out, in): "
            "multiply by the transpose, x @ W1.T + b1.",
        ),
        Returns(
            lambda x, W1, b1, W2, b2: (
                torch.nn.functional.gelu(_hidden(x, W1, b1)) @ W2.T + b2
            ),
            "Use the ReLU, max(0, ·), as in the notes' Linear–ReLU–Linear; GELU is "
            "GPT-2's choice, not this exercise's.",
        ),
        Returns(
            lambda x, W1, b1, W2, b2: [
                torch.relu(x @ W1.T) @ W2.T,
                torch.relu(x @ W1.T + b1) @ W2.T,
            ],
            "Add the biases: b1 after the first layer, b2 after the second.",
        ),
    ),
    otherwise="MLP(x) = ReLU(x W1ᵀ + b1) W2ᵀ + b2, for every token: compare with "
    "tc.MLP(D, d_mlp, activation='relu').",
)


def _mlp_token_cases():
    x = seeded_randn(2, 5, 6, seed=50)
    changed = x.clone()
    changed[:, 1:] = seeded_randn(2, 4, 6, seed=51) * 5
    weights = _mlp_weights(6, 12, seed=52)
    return [(x, *weights), (changed, *weights)]


def _judge_mlp_token(cases, outcomes):
    first, changed = returned_values(outcomes)
    if first.shape != cases[0][0].shape or changed.shape != first.shape:
        raise Failed("The output has the input's shape (..., D).")
    if not close(first[:, 0], changed[:, 0]):
        raise Failed(
            "The MLP refines each token on its own (Turner §2.2): token n's output "
            "depends on token n only. Don't sum, average or multiply across tokens."
        )


def _random_mlp(g):
    cases = []
    for leading in (1, 2, 3):  # x of shape (..., N, D): (N, D), (B, N, D), ...
        b, n, D = (int(t) for t in torch.randint(1, 9, (3,), generator=g))
        d_mlp = int(torch.randint(9 if leading == 2 else 1, 33, (), generator=g))
        x = torch.randn(*(b,) * (leading - 1), n, D, generator=g)
        cases.append((x, *_mlp_weights(D, d_mlp, g)))
    return cases


MLP_FORWARD = Exercise(
    "mlp_forward",
    "mlp_forward",
    "Exercise 2: the MLP, applied to every token",
    3,
    (
        Check(
            "equals tc.MLP(activation='relu') with these weights",
            _mlp_cases,
            MLP_TABLE,
        ),
        unseen_check("the same on unseen inputs", _random_mlp, MLP_TABLE),
        Check(
            "a token's output ignores the other tokens",
            _mlp_token_cases,
            _judge_mlp_token,
            PROPERTY,
        ),
    ),
)

# --- Exercises 3 and 4: the block, pre-norm and post-norm --------------------------------


def _block_params(D, d_mlp, g):
    """A state dict of tc.Block(BlockConfig(D, H, d_mlp, activation='relu')), with
    γ and β drawn away from 1 and 0 so that the two norms differ."""

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    return {
        "norm_1.weight": 1 + randn(D) / 2,
        "norm_1.bias": randn(D) / 2,
        "attn.qkv_proj.weight": randn(3 * D, D) / D**0.5,
        "attn.qkv_proj.bias": randn(3 * D) / 4,
        "attn.out_proj.weight": randn(D, D) / D**0.5,
        "attn.out_proj.bias": randn(D) / 4,
        "norm_2.weight": 1 + randn(D) / 2,
        "norm_2.bias": randn(D) / 2,
        "mlp.up_proj.weight": randn(d_mlp, D) / D**0.5,
        "mlp.up_proj.bias": randn(d_mlp) / 4,
        "mlp.down_proj.weight": randn(D, d_mlp) / d_mlp**0.5,
        "mlp.down_proj.bias": randn(D) / 4,
    }


def _reference_block(params, n_heads, norm_first):
    D, d_mlp = params["mlp.up_proj.weight"].shape[::-1]
    config = BlockConfig(D, n_heads, d_mlp, activation="relu", norm_first=norm_first)
    with torch.random.fork_rng(devices=[]):
        block = Block(config)
    block.load_state_dict(params)
    return block.eval()


def _block_case(B, N, H, d, d_mlp, seed):
    g = torch.Generator().manual_seed(seed)
    D = H * d
    return (torch.randn(B, N, D, generator=g), _block_params(D, d_mlp, g), H)


def _block_cases():
    return [_block_case(2, 5, 2, 4, 12, seed=60), _block_case(1, 4, 3, 2, 24, seed=61)]


def _random_blocks(g):
    cases = []
    for _ in range(2):
        B, H = (int(t) for t in torch.randint(1, 5, (2,), generator=g))
        N = int(torch.randint(5 if not cases else 1, 9, (), generator=g))
        d, d_mlp = (
            int(torch.randint(2, 5, (), generator=g)),
            int(torch.randint(1, 33, (), generator=g)),
        )
        x = torch.randn(B, N, H * d, generator=g)
        cases.append((x, _block_params(H * d, d_mlp, g), H))
    return cases


class _Parts:
    """The block's pieces, to rebuild the usual wrong orders."""

    def __init__(self, params, n_heads):
        self.block = _reference_block(params, n_heads, norm_first=True)
        self.params = params

    def norm(self, h, which):
        p = self.params
        return _layer_norm(h, p[f"norm_{which}.weight"], p[f"norm_{which}.bias"])

    def attn(self, h):
        return self.block.attn(h)

    def mlp(self, h):
        return self.block.mlp(h)


RESIDUAL_HINT = (
    "Add each branch to its input, the residual connection: x = x + attn(…), then "
    "x = x + mlp(…); without it the block cannot pass its input through."
)
SECOND_NORM_HINT = (
    "The MLP branch has its own normalisation, norm_2 (params['norm_2.weight'], "
    "params['norm_2.bias']); norm_1 belongs to the attention branch."
)


def _block_output(norm_first):
    """The reference block's output for a case, (B, N, D)."""

    def output(x, params, n_heads):
        with torch.no_grad():
            return _reference_block(params, n_heads, norm_first)(x)

    return output


def _wrong_block(wrong, hint):
    """A usual mistake of a block: ``wrong(norm, attn, mlp, x)`` with the
    case's own pieces (:class:`_Parts`), ``norm(h, 1)`` being norm_1."""

    def returns(x, params, n_heads):
        p = _Parts(params, n_heads)
        with torch.no_grad():
            return wrong(p.norm, p.attn, p.mlp, x)

    return Returns(returns, hint)


def _post_norm(norm, attn, mlp, x):
    y = norm(x + attn(x), 1)
    return norm(y + mlp(y), 2)


def _residual_of_normalised(norm, attn, mlp, x):
    h = norm(x, 1)
    y = h + attn(h)
    return norm(y, 2) + mlp(norm(y, 2))


def _pre_norm_without_residual(norm, attn, mlp, x):
    y = x + attn(norm(x, 1))
    branch = attn(norm(x, 1))
    return [mlp(norm(branch, 2)), branch + mlp(norm(branch, 2)), mlp(norm(y, 2))]


def _parallel_branches(norm, attn, mlp, x):
    """Both branches read x (GPT-J's and PaLM's parallel block)."""
    return x + attn(norm(x, 1)) + mlp(norm(x, 2))


def _pre_norm_then_a_norm(norm, attn, mlp, x):
    """The pre-norm block, then a LayerNorm of its output (either norm's)."""
    y = x + attn(norm(x, 1))
    z = y + mlp(norm(y, 2))
    return [norm(z, 1), norm(z, 2)]


def _pre_norm_with_norms(first, second):
    def block(norm, attn, mlp, x):
        y = x + attn(norm(x, first))
        return y + mlp(norm(y, second))

    return block


SAME_SHAPE = WrongShape(
    lambda case, got, want: (
        f"The block maps (B, N, D) to (B, N, D) = {tuple(case[0].shape)}, got {tuple(got.shape)}."
    )
)
PRE_NORM_TABLE = Table(
    reference=_block_output(norm_first=True),
    case_by_case=True,
    rows=(
        SAME_SHAPE,
        _wrong_block(
            _post_norm,
            "That is the post-norm block (Add & Normalize). Pre-norm normalises "
            "the input of each branch and adds to x itself: "
            "x = x + attn(norm_1(x)); x = x + mlp(norm_2(x)).",
        ),
        _wrong_block(
            _residual_of_normalised,
            "The residual adds the branch to x itself, not to its normalised "
            "copy: x + attn(norm_1(x)), so that the residual path carries x "
            "unchanged (Turner fig. 7).",
        ),
        _wrong_block(_pre_norm_without_residual, RESIDUAL_HINT),
        _wrong_block(_pre_norm_with_norms(1, 1), SECOND_NORM_HINT),
        _wrong_block(
            _pre_norm_with_norms(2, 1),
            "norm_1 goes before attention, norm_2 before the MLP: you swapped them.",
        ),
        _wrong_block(
            _parallel_branches,
            "Both branches read x: that is the parallel block (GPT-J, PaLM). Here "
            "the MLP reads the stream after attention was added: y = x + "
            "attn(norm_1(x)), then y + mlp(norm_2(y)).",
        ),
        _wrong_block(
            _pre_norm_then_a_norm,
            "The block ends with the sum, not a LayerNorm: between pre-norm blocks "
            "the stream stays unnormalised (the one final LayerNorm comes after "
            "the last block, chapter 6's final_norm).",
        ),
    ),
    otherwise="Pre-norm: x = x + attn(norm_1(x)), then x = x + mlp(norm_2(x)), with "
    "your layer_norm and mlp_forward and the given self_attention.",
)


def _louder_attention(norm_first: bool):
    """The loud twin of a block case: the query and key weights scaled so that
    the largest attention score reaches :data:`LOUD` (a few hundred, past 88,
    where ``exp`` overflows in float32). Scaling x would not do: in a pre-norm
    block attention sees norm_1(x), whatever x's scale."""

    def loud(case):
        x, params, H = case
        p = {name: value.double() for name, value in params.items()}
        h = x.double()
        if norm_first:
            h = _layer_norm(h, p["norm_1.weight"], p["norm_1.bias"])
        D = h.shape[-1]
        qkv = h @ p["attn.qkv_proj.weight"].T + p["attn.qkv_proj.bias"]
        q, k, _ = qkv.split(D, dim=-1)  # (B, N, D) each
        scale = loud_score_scale(split_heads(q, H), split_heads(k, H))  # (B, H, N, d)
        params = dict(params)
        for kind in ("weight", "bias"):  # rows 0..2D-1 make q and k
            w = params[f"attn.qkv_proj.{kind}"].clone()
            w[: 2 * D] *= scale
            params[f"attn.qkv_proj.{kind}"] = w
        return (x, params, H)

    return loud


def _zero_branch_cases():
    cases = []
    for x, params, H in _block_cases():
        params = dict(params)
        for name in ("attn.out_proj", "mlp.down_proj"):
            for kind in ("weight", "bias"):
                params[f"{name}.{kind}"] = torch.zeros_like(params[f"{name}.{kind}"])
        cases.append((x, params, H))
    return cases


def _judge_zero_branch(cases, outcomes):
    for (x, *_), got in each_value(cases, outcomes):
        if not close(got, x):
            raise Failed(
                "When both branches output zero, a pre-norm block must return its input "
                "unchanged: the residual path x is never normalised (Turner §2.3)."
            )


PRE_NORM = Exercise(
    "pre_norm_block",
    "pre_norm_block",
    "Exercise 3: a pre-norm block",
    4,
    (
        Check(
            "equals tc.Block (pre-norm) with these weights",
            _block_cases,
            PRE_NORM_TABLE,
        ),
        unseen_check("the same on unseen inputs", _random_blocks, PRE_NORM_TABLE),
        Check(
            "branches that output zero pass x through",
            _zero_branch_cases,
            _judge_zero_branch,
            PROPERTY,
        ),
    ),
    forbidden=("transformer_layer",),
    loud=_louder_attention(norm_first=True),  # a softmax inside: scores past 88
    builds_on=("layer_norm", "mlp_forward"),
)


def _norm_of_branch(norm, attn, mlp, x):
    y = x + norm(attn(x), 1)
    return y + norm(mlp(y), 2)


def _post_norm_without_residual(norm, attn, mlp, x):
    branch = norm(attn(x), 1)
    return [
        norm(mlp(branch), 2),
        norm(branch + mlp(branch), 2),
        norm(mlp(norm(x + attn(x), 1)), 2),
    ]


def _post_norm_with(last):
    """Post-norm with norm_1 after both additions, or none after the second."""

    def block(norm, attn, mlp, x):
        y = norm(x + attn(x), 1)
        return y + mlp(y) if last is None else norm(y + mlp(y), last)

    return block


POST_NORM_TABLE = Table(
    reference=_block_output(norm_first=False),
    case_by_case=True,
    rows=(
        SAME_SHAPE,
        Returns(
            _block_output(norm_first=True),
            "That is the pre-norm block. Post-norm, the original transformer's "
            "Add & Normalize, normalises after each addition: "
            "x = norm_1(x + attn(x)); x = norm_2(x + mlp(x)).",
        ),
        _wrong_block(
            _norm_of_branch,
            "Normalise the sum, x + attn(x), not the branch's output alone: "
            "Add, then Normalize.",
        ),
        _wrong_block(_post_norm_without_residual, RESIDUAL_HINT),
        _wrong_block(_post_norm_with(1), SECOND_NORM_HINT),
        _wrong_block(
            _post_norm_with(None),
            "Normalise after the MLP's addition too: x = norm_2(x + mlp(x)).",
        ),
    ),
    otherwise="Post-norm: x = norm_1(x + attn(x)), then x = norm_2(x + mlp(x)), with "
    "your layer_norm and mlp_forward and the given self_attention.",
)


def _post_norm_cases():
    """The blocks of the pre-norm check, and one where a token reaches the first
    norm constant (the attention's output projection is zero, and so is a token
    of x): its variance is 0, and only ε keeps LayerNorm finite there (the
    twelfth red team's ε = 0 passed the other cases)."""
    x, params, H = _block_case(2, 4, 2, 4, 12, seed=62)
    params = dict(params)
    params["attn.out_proj.weight"] = torch.zeros_like(params["attn.out_proj.weight"])
    params["attn.out_proj.bias"] = torch.zeros_like(params["attn.out_proj.bias"])
    x = x.clone()
    x[0, 1] = 0.0
    return [*_block_cases(), (x, params, H)]


def _unit_norm_cases():
    cases = []
    for x, params, H in _block_cases():
        params = dict(params)
        params["norm_2.weight"] = torch.ones_like(params["norm_2.weight"])
        params["norm_2.bias"] = torch.zeros_like(params["norm_2.bias"])
        cases.append((x, params, H))
    return cases


def _judge_unit_norm(cases, outcomes):
    for _, got in each_value(cases, outcomes):
        mean, var = got.mean(-1), got.var(-1, unbiased=False)
        if not (
            close(mean, torch.zeros_like(mean), atol=1e-4)
            and close(var, torch.ones_like(var), atol=1e-3)
        ):
            raise Failed(
                "A post-norm block ends with norm_2: with γ₂ = 1 and β₂ = 0 every "
                "output token has mean 0 and variance 1."
            )


POST_NORM = Exercise(
    "post_norm_block",
    "post_norm_block",
    "Exercise 4: a post-norm block",
    3,
    (
        Check(
            "equals tc.Block (post-norm) with these weights",
            _post_norm_cases,
            POST_NORM_TABLE,
        ),
        unseen_check("the same on unseen inputs", _random_blocks, POST_NORM_TABLE),
        Check(
            "with γ₂ = 1, β₂ = 0 each output token has mean 0, variance 1",
            _unit_norm_cases,
            _judge_unit_norm,
            PROPERTY,
        ),
    ),
    forbidden=("transformer_layer",),
    loud=_louder_attention(norm_first=False),  # a softmax inside: scores past 88
    builds_on=("layer_norm", "mlp_forward"),
)

# --- Exercise 5: counting a block's parameters ----------------------------------------


def block_parameters(d_model: int, n_heads: int, d_mlp: int, bias: bool) -> int:
    """The number of parameters of tc.Block with this configuration (counted)."""
    config = BlockConfig(d_model, n_heads, d_mlp, bias=bias)
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        block = Block(config)  # on the meta device: shapes only, no memory
    return sum(p.numel() for p in block.parameters())


def _count_cases():
    return [
        (64, 4, 256, True),
        (64, 8, 256, True),
        (64, 4, 100, True),
        (512, 8, 2048, True),
        (96, 3, 384, False),
        (30, 5, 7, False),
    ]


def _judge_count(cases, outcomes):
    cases = [(*case, True) if len(case) == 3 else case for case in cases]  # default
    counts = returned_values(outcomes, int)
    same_but_heads = {
        c
        for (D, _, m, b), c in zip(cases, counts, strict=True)
        if (D, m, b) == (64, 256, True)
    }
    for (D, H, m, bias), got in zip(cases, counts, strict=True):
        want = block_parameters(D, H, m, bias)
        if got == want:
            continue
        if len(same_but_heads) > 1:
            raise Failed(
                "The count must not depend on the number of heads: all heads together "
                "still need D×D per projection."
            )
        linear_biases = 4 * D + m + D  # q, k, v, out; the MLP's two layers
        norms = 4 * D if bias else 2 * D  # two norms: γ and β, or γ alone
        if bias and got == want - linear_biases:
            raise Failed(
                "Add the biases of the linear layers: 3D (q, k, v) and D (output) in "
                "attention, d_mlp and D in the MLP."
            )
        if not bias and got == want + linear_biases + 2 * D:
            raise Failed(
                "With bias=False there are no biases, and the LayerNorms have γ only (no β)."
            )
        if got - (want - norms) in (0, D, 2 * D, 3 * D, 6 * D, 8 * D) and got != want:
            raise Failed(
                "Count the two LayerNorms: each has γ and β, D values each (γ alone, "
                "D values, when bias=False)."
            )
        if got in (want - D * D, want - D * D - (D if bias else 0)):
            raise Failed(
                "Attention has four D×D matrices, q, k, v and the output projection "
                "(and 4D biases), not three."
            )
        if m != 4 * D and got == want - 2 * D * m + 8 * D * D - (
            m - 4 * D if bias else 0
        ):
            raise Failed(
                "Use d_mlp: the MLP has D×d_mlp + d_mlp×D weights (8D² only when d_mlp = 4D)."
            )
        raise Failed(
            f"For D={D}, H={H}, d_mlp={m}, bias={bias} expected {want:,}, got {got:,}: "
            "attention 4D² (+ 4D), the MLP 2·D·d_mlp (+ d_mlp + D), two norms of 2D "
            "(D each without biases)."
        )


def _random_counts(g):
    cases = []
    for bias in (True, False):
        h = int(torch.randint(1, 40, (), generator=g))
        d = int(torch.randint(1, 130, (), generator=g))
        m = int(torch.randint(40 if bias else 1, 4097, (), generator=g))
        cases.append((h * d, h, m, bias))
    # and the default, bias=True, left out
    h, d, m = (int(t) for t in torch.randint(1, 40, (3,), generator=g))
    cases.append((h * d, h, m))
    return cases


def _resize_count(case, i, g):
    """One size of (D, H, d_mlp[, bias]) changed: D (a multiple of H), H
    (another divisor of D) or d_mlp; bias, or its omission, kept."""
    D, H, d_mlp, *bias = case
    if i == 0:
        return (resized(D, g, multiple_of=H), H, d_mlp, *bias)
    if i == 1:
        other = other_divisor(D, H, g)
        return None if other is None else (D, other, d_mlp, *bias)
    if i == 2:
        return (D, H, resized(d_mlp, g), *bias)
    return None


COUNT = Exercise(
    "block_parameter_count",
    "block_parameter_count",
    "Exercise 5: count a block's parameters",
    2,
    (
        Check(
            "equals sum(p.numel()) of tc.Block, for any H",
            _count_cases,
            _judge_count,
        ),
        unseen_check("the same for unseen sizes", _random_counts, _judge_count),
    ),
    twins=lambda case, g: one_size_at_a_time(case, g, _resize_count),
    mutable_inputs=False,  # numbers and strings only: nothing to change in place
)

EXERCISES: dict[str, Exercise] = {
    e.key: e for e in (LAYER_NORM, MLP_FORWARD, PRE_NORM, POST_NORM, COUNT)
}

QUIZZES = load_quizzes("ch04")  # quizzes/ch04.toml
