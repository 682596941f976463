"""transformer_course.attention (chapter 2), against PyTorch's own references."""

import math

import pytest
import torch
import torch.nn.functional as F

import transformer_course.attention as att
from transformer_course.shapes import ShapeError

F64 = torch.float64
SHAPES = [  # (batch dims, N_q, N_k, d, d_v)
    ((), 4, 4, 8, 8),
    ((2,), 5, 7, 4, 3),
    ((2, 3), 6, 6, 16, 5),
    ((1, 2), 1, 9, 8, 8),
]


def qkv(batch, n_q, n_k, d, d_v, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, dtype=F64, generator=g).requires_grad_(grad)  # noqa: E731
    return make(*batch, n_q, d), make(*batch, n_k, d), make(*batch, n_k, d_v)


def assert_same_values_and_grads(ours, reference, inputs):
    torch.testing.assert_close(ours, reference)
    upstream = torch.randn_like(ours)
    for got, want in zip(
        torch.autograd.grad(ours, inputs, upstream),
        torch.autograd.grad(reference, inputs, upstream),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scale", [None, 0.5])
def test_equals_torch_sdpa(shape, scale):
    q, k, v = qkv(*shape)
    ours = att.scaled_dot_product_attention(q, k, v, scale=scale)
    reference = F.scaled_dot_product_attention(q, k, v, scale=scale)
    assert_same_values_and_grads(ours, reference, (q, k, v))


@pytest.mark.parametrize("shape", SHAPES)
def test_equals_torch_sdpa_with_boolean_mask(shape):
    q, k, v = qkv(*shape, seed=1)
    mask = (
        torch.rand(shape[1], shape[2], generator=torch.Generator().manual_seed(2)) > 0.4
    )
    mask[:, 0] = True  # every query may attend somewhere
    ours = att.scaled_dot_product_attention(q, k, v, mask=mask)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_same_values_and_grads(ours, reference, (q, k, v))


@pytest.mark.parametrize("shape", SHAPES)
def test_equals_torch_sdpa_with_additive_mask(shape):
    q, k, v = qkv(*shape, seed=3)
    bias = torch.randn(
        *shape[0],
        shape[1],
        shape[2],
        dtype=F64,
        generator=torch.Generator().manual_seed(4),
    )
    ours = att.scaled_dot_product_attention(q, k, v, mask=bias)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert_same_values_and_grads(ours, reference, (q, k, v))


@pytest.mark.parametrize("shape", [s for s in SHAPES if s[1] <= s[2]])
def test_equals_torch_sdpa_causal(shape):
    q, k, v = qkv(*shape, seed=5)
    ours = att.scaled_dot_product_attention(q, k, v, is_causal=True)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_same_values_and_grads(ours, reference, (q, k, v))


def test_causal_weights_are_zero_above_the_diagonal():
    q, k, v = qkv((2,), 5, 5, 4, 4, grad=False)
    _, weights = att.scaled_dot_product_attention(
        q, k, v, is_causal=True, return_weights=True
    )
    assert torch.all(weights.triu(diagonal=1) == 0)
    torch.testing.assert_close(weights[..., 0, 0], torch.ones(2, dtype=F64))


@pytest.mark.parametrize("shape", SHAPES)
def test_rows_of_the_weights_sum_to_one(shape):
    q, k, _ = qkv(*shape, grad=False)
    weights = att.attention_weights(q, k)
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(weights.shape[:-1], dtype=F64)
    )
    assert (weights >= 0).all()


def test_gradcheck():
    q, k, v = qkv((2,), 3, 4, 2, 3)
    assert torch.autograd.gradcheck(att.scaled_dot_product_attention, (q, k, v))
    x = torch.randn(2, 5, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(att.softmax, (x,))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_equals_torch_and_is_stable(dim):
    x = torch.tensor(
        [[1e4, -1e4, 0.0], [3.0, 3.0, 3.0], [-1e4, -1e4 + 1, 5.0]],
        dtype=F64,
        requires_grad=True,
    )
    ours, reference = att.softmax(x, dim=dim), torch.softmax(x, dim=dim)
    assert torch.isfinite(ours).all()
    assert_same_values_and_grads(ours, reference, (x,))


def test_naive_softmax_overflows_where_the_stable_one_does_not():
    x = torch.tensor([1000.0, 0.0])
    naive = x.exp() / x.exp().sum()
    assert torch.isnan(naive).any()
    torch.testing.assert_close(att.softmax(x), torch.tensor([1.0, 0.0]))


def test_stable_for_huge_logits_in_attention():
    q = torch.tensor([[100.0, 0.0]], dtype=F64)
    k = torch.tensor(
        [[100.0, 0.0], [-100.0, 0.0]], dtype=F64
    )  # scores ±1e4 before scaling
    v = torch.eye(2, dtype=F64)
    out = att.scaled_dot_product_attention(q, k, v, scale=1.0)
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0]], dtype=F64))


def test_self_attention_is_permutation_equivariant():
    torch.manual_seed(0)
    layer = att.SelfAttention(d_model=6, d_k=4, d_v=5).double()
    x = torch.randn(2, 7, 6, dtype=F64)
    perm = torch.randperm(7)
    torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm])


def test_self_attention_equals_sdpa_on_its_projections():
    torch.manual_seed(1)
    layer = att.SelfAttention(d_model=6, d_k=4, d_v=5, bias=True).double()
    x = torch.randn(3, 5, 6, dtype=F64, requires_grad=True)
    out, weights = layer(x, need_weights=True)
    reference = F.scaled_dot_product_attention(
        layer.query_proj(x), layer.key_proj(x), layer.value_proj(x)
    )
    assert_same_values_and_grads(out, reference, (x,))
    assert weights.shape == (3, 5, 5)


def test_additive_scores_match_their_formula():
    g = torch.Generator().manual_seed(0)
    q, k = (
        torch.randn(3, 4, dtype=F64, generator=g),
        torch.randn(5, 2, dtype=F64, generator=g),
    )
    W_q, W_k, w = (
        torch.randn(*s, dtype=F64, generator=g) for s in [(6, 4), (6, 2), (6,)]
    )
    scores = att.additive_scores(q, k, W_q, W_k, w)
    for n in range(3):
        for m in range(5):
            expected = w @ torch.tanh(W_q @ q[n] + W_k @ k[m])
            torch.testing.assert_close(scores[n, m], expected)


def test_additive_attention_module_averages_values():
    torch.manual_seed(0)
    layer = att.AdditiveAttention(d_query=4, d_key=3, d_hidden=8).double()
    q, k, v = (
        torch.randn(2, 5, 4, dtype=F64),
        torch.randn(2, 6, 3, dtype=F64),
        torch.randn(2, 6, 7, dtype=F64),
    )
    out, weights = layer(q, k, v)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5, dtype=F64))
    torch.testing.assert_close(out, weights @ v)
    mask = att.causal_mask(5, 6)
    _, masked = layer(q, k, v, mask=mask)
    assert torch.all(masked[..., ~mask] == 0)


def test_default_scale_is_one_over_sqrt_d():
    q, k, _ = qkv((), 3, 3, 16, 16, grad=False)
    torch.testing.assert_close(
        att.attention_weights(q, k), torch.softmax(q @ k.T / math.sqrt(16), -1)
    )


def test_clear_errors_for_mismatched_shapes():
    q, k, v = qkv((2,), 4, 5, 8, 3, grad=False)
    with pytest.raises(
        ShapeError,
        match=r"k: expected shape \(\.\.\., M, d\) with d=8, got \(2, 5, 6\)",
    ):
        att.scaled_dot_product_attention(q, k[..., :6], v)
    with pytest.raises(
        ShapeError,
        match=r"v: expected shape \(\.\.\., M, e\) with M=5, got \(2, 4, 3\)",
    ):
        att.scaled_dot_product_attention(q, k, v[:, :4])
    with pytest.raises(
        ShapeError,
        match=r"mask: expected a shape broadcastable to .* \(2, 4, 5\), got \(3, 3\)",
    ):
        att.scaled_dot_product_attention(
            q, k, v, mask=torch.ones(3, 3, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match="either mask or is_causal"):
        att.attention_weights(
            q, k, mask=torch.ones(4, 5, dtype=torch.bool), is_causal=True
        )
    with pytest.raises(
        ShapeError, match=r"x: expected shape \(\.\.\., N, D\) with D=6"
    ):
        att.SelfAttention(6, 4, 4)(torch.zeros(2, 3, 5))
