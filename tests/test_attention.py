"""transformer_course.attention (chapter 2), against PyTorch's own references."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

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


def torch_causal(n_q, n_k):
    """torch's bottom-right causal mask, for F.scaled_dot_product_attention."""
    with warnings.catch_warnings():  # it warns of NaN rows for N_q > N_k (it gives 0)
        warnings.simplefilter("ignore", UserWarning)
        return causal_lower_right(n_q, n_k)


def torch_causal_as_booleans(n_q, n_k):
    """torch's bottom-right mask read off through its public API: with q = 0 every
    allowed key gets the same positive weight, and v = I returns the weights."""
    q, k = torch.zeros(n_q, 1, dtype=F64), torch.zeros(n_k, 1, dtype=F64)
    weights = F.scaled_dot_product_attention(
        q, k, torch.eye(n_k, dtype=F64), attn_mask=torch_causal(n_q, n_k)
    )  # (N_q, N_k)
    return weights > 0


CAUSAL_SHAPES = [*SHAPES, ((2,), 6, 3, 4, 4)]  # the last: N_q > N_k


@pytest.mark.parametrize("shape", CAUSAL_SHAPES)
def test_equals_torch_sdpa_causal_aligned_bottom_right(shape):
    q, k, v = qkv(*shape, seed=5)
    n_q, n_k = shape[1], shape[2]
    ours = att.scaled_dot_product_attention(q, k, v, is_causal=True)
    if n_q == n_k:  # torch's own is_causal aligns top-left: right only when square
        reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        reference = F.scaled_dot_product_attention(
            q, k, v, attn_mask=torch_causal(n_q, n_k)
        )
    assert_same_values_and_grads(ours, reference, (q, k, v))


@pytest.mark.parametrize(("n_q", "n_k"), [(1, 1), (4, 4), (1, 5), (3, 7), (6, 2)])
def test_causal_mask_is_aligned_bottom_right(n_q, n_k):
    mask = att.causal_mask(n_q, n_k)
    if n_q == n_k:
        expected = torch.ones(n_q, n_q).tril().bool()
    else:
        expected = torch_causal_as_booleans(n_q, n_k)
    torch.testing.assert_close(mask, expected)
    assert mask[-1].all()  # the newest query sees every key, cached ones included


def test_causal_mask_lets_a_new_query_see_every_cached_key():
    # a KV cache: 5 tokens seen, 2 new ones. New token 0 is position 5: keys 0..5.
    q, k, v = qkv((), 2, 7, 4, 4, seed=6, grad=False)
    _, weights = att.scaled_dot_product_attention(
        q, k, v, is_causal=True, return_weights=True
    )
    assert (weights[0, :6] > 0).all()
    assert weights[0, 6] == 0
    assert (weights[1] > 0).all()
    # and equal to attending from the full sequence, then keeping the last 2 rows
    earlier = torch.randn(5, 4, dtype=F64, generator=torch.Generator().manual_seed(1))
    full_q = torch.cat([earlier, q])  # (7, 4)
    full = att.scaled_dot_product_attention(full_q, k, v, is_causal=True)
    torch.testing.assert_close(
        att.scaled_dot_product_attention(q, k, v, is_causal=True), full[5:]
    )


def mask_of_kind(kind, shape, seed=7, grad=False):
    """A random boolean, additive, or additive-with--inf mask (..., N_q, N_k)."""
    batch, n_q, n_k = shape[0], shape[1], shape[2]
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(*batch, n_q, n_k, generator=g) > 0.4
    if kind == "boolean":
        return allowed
    bias = torch.randn(*batch, n_q, n_k, dtype=F64, generator=g)
    bias = bias.masked_fill(~allowed, float("-inf")) if kind == "-inf" else bias
    return bias.requires_grad_(grad)  # a learned bias (e.g. relative positions)


@pytest.mark.parametrize("shape", CAUSAL_SHAPES)
@pytest.mark.parametrize("kind", ["boolean", "float", "-inf"])
def test_mask_and_is_causal_combine(shape, kind):
    q, k, v = qkv(*shape, seed=8)
    mask = mask_of_kind(kind, shape, grad=kind == "float")
    causal = att.causal_mask(shape[1], shape[2])  # checked against torch above
    if kind == "boolean":
        combined = mask & causal
    else:
        combined = mask.masked_fill(~causal, float("-inf"))
    ours = att.scaled_dot_product_attention(q, k, v, mask=mask, is_causal=True)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=combined)
    inputs = (q, k, v, mask) if mask.requires_grad else (q, k, v)
    assert_same_values_and_grads(ours, reference, inputs)


@pytest.mark.parametrize("kind", ["boolean", "-inf", "padding", "causal"])
def test_fully_masked_rows_give_zeros_like_torch(kind):
    """A query allowed no key: output 0, weights 0, finite gradients, as torch."""
    q, k, v = qkv((2, 3), 5, 6, 4, 3, seed=9)
    if kind == "boolean":
        mask = torch.ones(5, 6, dtype=torch.bool)
        mask[1] = False  # query 1 may see nothing
        empty_rows = (..., 1, slice(None))
    elif kind == "-inf":
        mask = torch.zeros(2, 3, 5, 6, dtype=F64)
        mask[0, 2, 3] = float("-inf")
        empty_rows = (0, 2, 3)
    elif kind == "padding":  # every key of batch element 1 is padding
        mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
        mask[1] = False
        empty_rows = (1,)
    else:  # only the last key allowed, and causally only queries 4 (and 5) see it
        mask = torch.zeros(5, 6, dtype=torch.bool)
        mask[:, -1] = True
        empty_rows = (..., slice(0, 4), slice(None))
    ours, weights = att.scaled_dot_product_attention(
        q, k, v, mask=mask, return_weights=True, is_causal=kind == "causal"
    )
    if kind == "causal":
        mask = mask & att.causal_mask(5, 6)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (ours[empty_rows] == 0).all()
    assert (weights[empty_rows] == 0).all()
    for grad in torch.autograd.grad(ours.sum(), (q, k, v), retain_graph=True):
        assert torch.isfinite(grad).all()
    assert_same_values_and_grads(ours, reference, (q, k, v))


def test_masked_softmax_is_softmax_where_a_row_allows_something():
    x = torch.randn(4, 5, dtype=F64, requires_grad=True)
    forbid = torch.zeros(4, 5, dtype=F64)
    forbid[1, 2:] = float("-inf")
    forbid[3] = float("-inf")
    ours = att.masked_softmax(x + forbid)
    torch.testing.assert_close(ours[:3], torch.softmax(x + forbid, -1)[:3])
    torch.testing.assert_close(ours[3], torch.zeros(5, dtype=F64))
    assert torch.isnan(att.softmax(x + forbid)[3]).all()  # the plain one: 0/0
    assert torch.isfinite(torch.autograd.grad(ours.sum(), x)[0]).all()


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
    mask[2] = False  # query 2 may attend to nothing: zeros, not NaN
    out, masked = layer(q, k, v, mask=mask)
    assert torch.all(masked[:, 2] == 0)
    assert torch.all(out[:, 2] == 0)
    assert torch.isfinite(out).all()


def test_default_scale_is_one_over_sqrt_d():
    q, k, _ = qkv((), 3, 3, 16, 16, grad=False)
    torch.testing.assert_close(
        att.attention_weights(q, k), torch.softmax(q @ k.T / math.sqrt(16), -1)
    )


Q, K, V = (torch.zeros(2, 4, 8), torch.zeros(2, 5, 8), torch.zeros(2, 5, 3))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: att.scaled_dot_product_attention(Q, K[..., :6], V),
            ShapeError,
            r"k: expected shape \(\.\.\., M, d\) with d=8, got \(2, 5, 6\)",
        ),
        (
            lambda: att.scaled_dot_product_attention(Q, K, V[:, :4]),
            ShapeError,
            r"v: expected shape \(\.\.\., M, e\) with M=5, got \(2, 4, 3\)",
        ),
        (
            lambda: att.scaled_dot_product_attention(Q, K, torch.zeros(3, 5, 3)),
            ShapeError,
            r"q, k, v: expected batch dimensions that broadcast, got q \(2, 4, 8\), "
            r"k \(2, 5, 8\) and v \(3, 5, 3\)",
        ),
        (
            lambda: att.attention_weights(Q, torch.zeros(3, 5, 8)),
            ShapeError,
            r"q, k: expected batch dimensions that broadcast, got q \(2, 4, 8\) "
            r"and k \(3, 5, 8\)",
        ),
        (
            lambda: att.attention_weights(Q, K.double()),
            TypeError,
            r"q, k: expected the same floating-point dtype, got torch.float32 and "
            r"torch.float64",
        ),
        (
            lambda: att.SelfAttention(6, 4, 4)(torch.zeros(2, 3, 5)),
            ShapeError,
            r"x: expected shape \(\.\.\., N, D\) with D=6, got \(2, 3, 5\)",
        ),
    ],
)
def test_mismatched_shapes_and_dtypes_name_both(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    ("mask", "error", "message"),
    [
        (
            torch.ones(3, 3, dtype=torch.bool),
            ShapeError,
            r"mask: expected a shape broadcastable to the scores \(\.\.\., N_q, N_k\) "
            r"= \(2, 4, 5\), got \(3, 3\)",
        ),
        (  # would broadcast, but to more batch elements than the scores have
            torch.ones(7, 2, 4, 5, dtype=torch.bool),
            ShapeError,
            r"= \(2, 4, 5\), got \(7, 2, 4, 5\)",
        ),
        (
            torch.ones(4, 5, dtype=torch.int64),
            TypeError,
            r"mask: expected dtype torch.bool \(True = may attend\) or a "
            r"floating-point dtype \(added to the scores\), got torch.int64",
        ),
        (
            [[True] * 5] * 4,
            TypeError,
            r"mask: expected a boolean or floating-point torch.Tensor broadcastable "
            r"to \(\.\.\., N_q, N_k\) = \(2, 4, 5\), got list",
        ),
    ],
    ids=["shape", "too-many-batch-dims", "integer", "list"],
)
@pytest.mark.parametrize("is_causal", [False, True])
def test_bad_masks_are_rejected(mask, error, message, is_causal):
    with pytest.raises(error, match=message):
        att.scaled_dot_product_attention(Q, K, V, mask=mask, is_causal=is_causal)
    layer = att.AdditiveAttention(8, 8, 4)
    with pytest.raises(error, match=message):
        layer(Q, K, V, mask=mask)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: att.scaled_dot_product_attention(Q[:, :0], K, V),
            r"q: expected at least one query \(a sequence of length ≥ 1\), "
            r"got shape \(2, 0, 8\)",
        ),
        (
            lambda: att.scaled_dot_product_attention(Q, K[:, :0], V[:, :0]),
            r"k: expected at least one key .*, got shape \(2, 0, 8\)",
        ),
        (
            lambda: att.SelfAttention(8, 4, 4)(torch.zeros(2, 0, 8)),
            r"x: expected at least one token .*, got shape \(2, 0, 8\)",
        ),
        (
            lambda: att.AdditiveAttention(8, 8, 4)(Q, K[:, :0], V[:, :0]),
            r"k: expected at least one key .*, got shape \(2, 0, 8\)",
        ),
        (lambda: att.causal_mask(0), r"n_queries: expected a positive int, got 0"),
        (lambda: att.causal_mask(3, 0), r"n_keys: expected a positive int, got 0"),
    ],
)
def test_empty_sequences_are_rejected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: att.scaled_dot_product_attention([[1.0] * 8] * 4, K, V),
            r"q: expected a torch.Tensor of shape \(\.\.\. N d\), got list",
        ),
        (
            lambda: att.attention_weights(Q, [[1.0] * 8] * 5),
            r"k: expected a torch.Tensor of shape \(\.\.\. M d\), got list",
        ),
        (
            lambda: att.scaled_dot_product_attention(Q, K, [[1.0] * 3] * 5),
            r"v: expected a torch.Tensor of shape \(\.\.\. M e\), got list",
        ),
        (
            lambda: att.softmax([1.0, 2.0]),
            r"x: expected a torch.Tensor, got list",
        ),
        (
            lambda: att.SelfAttention(8, 4, 4)([[0.0] * 8]),
            r"x: expected a torch.Tensor of shape \(\.\.\. N D\), got list",
        ),
    ],
)
def test_lists_where_tensors_are_expected(call, message):
    with pytest.raises(TypeError, match=message):
        call()


# --- padding masks ---------------------------------------------------------


def test_padding_mask_marks_the_real_tokens():
    mask = att.padding_mask([3, 1, 0], 4)
    assert mask.shape == (3, 1, 4)
    assert mask.dtype == torch.bool
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=bool)
    assert torch.equal(mask[:, 0], expected)
    assert torch.equal(
        att.padding_mask(torch.tensor([2, 4]), 4)[1, 0], torch.ones(4, dtype=bool)
    )


@pytest.mark.parametrize("lengths", [[5, 2, 3], [1, 5, 4]])
def test_padding_equals_attending_to_the_real_keys_only(lengths):
    """With a padding mask, each sequence attends exactly as if cut to its length."""
    q, k, v = qkv((3,), 4, 5, 8, 3, seed=11)
    mask = att.padding_mask(lengths, 5)  # (B, 1, N_k)
    ours = att.scaled_dot_product_attention(q, k, v, mask=mask)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_same_values_and_grads(ours, reference, (q, k, v))
    for b, n in enumerate(lengths):
        alone = F.scaled_dot_product_attention(q[b], k[b, :n], v[b, :n])
        torch.testing.assert_close(ours[b], alone)


def test_padding_mask_with_heads_and_an_empty_sequence_equals_torch():
    q, k, v = qkv((2, 3), 4, 6, 8, 5, seed=12)  # (B, H, N, d)
    mask = att.padding_mask([0, 4], 6).unsqueeze(1)  # (B, 1, 1, N_k)
    ours = att.scaled_dot_product_attention(q, k, v, mask=mask)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (ours[0] == 0).all()  # sequence 0 has no real key: fully masked rows
    assert_same_values_and_grads(ours, reference, (q, k, v))


@pytest.mark.parametrize(
    ("lengths", "n_keys", "message"),
    [
        ([2, 7], 5, r"lengths: expected values in 0\.\.5 \(n_keys\), got \[2, 7\]"),
        ([-1], 5, r"lengths: expected values in 0\.\.5"),
        ([[1, 2]], 5, r"lengths: expected B integers .* shape \(1, 2\)"),
        ([1.5], 5, r"lengths: expected B integers .* dtype torch.float32"),
        ([1], 0, r"n_keys: expected a positive int, got 0"),
    ],
)
def test_bad_padding_lengths_are_rejected(lengths, n_keys, message):
    with pytest.raises(ValueError, match=message):
        att.padding_mask(lengths, n_keys)


# --- receptive fields and path lengths (the cost table of chapter 2) ------


def bfs_lengths(connectivity):
    """Reference: breadth-first search from every input m along 'n reads m' edges."""
    n = len(connectivity)
    readers = [[j for j in range(n) if connectivity[j, i]] for i in range(n)]
    lengths = torch.full((n, n), -1, dtype=torch.int64)
    for source in range(n):
        frontier, seen, depth = [source], set(), 0
        while frontier:
            depth += 1
            following = []
            for node in frontier:
                for reader in readers[node]:
                    if lengths[reader, source] < 0:
                        lengths[reader, source] = depth
                    if reader not in seen:
                        seen.add(reader)
                        following.append(reader)
            frontier = following
    return lengths


def band(n, radius):
    """A convolution of kernel 2·radius + 1: output n reads inputs n-r .. n+r."""
    return torch.ones(n, n, dtype=torch.bool).tril(radius).triu(-radius)


def recurrence(n):
    """One step of an RNN: state n reads state n - 1 and input n."""
    return torch.ones(n, n, dtype=torch.bool).tril().triu(-1)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("density", [0.1, 0.3])
def test_path_lengths_equal_breadth_first_search(seed, density):
    g = torch.Generator().manual_seed(seed)
    connectivity = torch.rand(9, 9, generator=g) < density
    assert torch.equal(att.path_lengths(connectivity), bfs_lengths(connectivity))


@pytest.mark.parametrize("n", [2, 7, 16])
def test_longest_paths_of_attention_convolution_and_recurrence(n):
    assert att.longest_path(torch.ones(n, n, dtype=torch.bool)) == 1
    assert att.longest_path(att.causal_mask(n)) == 1
    for radius in (1, 2, 3):
        assert att.longest_path(band(n, radius)) == math.ceil((n - 1) / radius)
    assert att.longest_path(recurrence(n)) == n - 1
    assert att.longest_path(torch.eye(n, dtype=torch.bool)) == 0  # nothing connects


def test_path_lengths_of_a_causal_layer_are_minus_one_backwards():
    lengths = att.path_lengths(recurrence(5))
    later = torch.arange(5)[:, None] - torch.arange(5)  # n - m
    assert torch.equal(lengths, torch.where(later >= 0, later.clamp_min(1), -1))
    assert lengths[4, 0] == 4  # four steps from the first token to the last


def test_receptive_field_grows_one_radius_per_layer():
    n, conv = 12, band(12, 1)
    for layers in range(1, 5):
        assert torch.equal(att.receptive_field(*[conv] * layers), band(n, layers))
    lengths = att.path_lengths(conv)
    for layers in range(1, n):
        reach = att.receptive_field(*[conv] * layers)
        assert torch.equal(reach, (lengths > 0) & (lengths <= layers))


def test_dilated_convolutions_cover_the_sequence_in_log_layers():
    n = 16
    dilated = [band(n, 0) | band(n, 2**i) & ~band(n, 2**i - 1) for i in range(4)]
    assert not att.receptive_field(*dilated[:3]).all()
    assert att.receptive_field(*dilated).all()  # offsets up to 1 + 2 + 4 + 8 = 15


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: att.path_lengths(torch.ones(3, 3)), TypeError, "expected a boolean"),
        (
            lambda: att.path_lengths(torch.ones(3, 4, dtype=torch.bool)),
            ShapeError,
            r"expected a square \(N, N\) matrix, got \(3, 4\)",
        ),
        (lambda: att.receptive_field(), ValueError, "at least one layer"),
        (
            lambda: att.receptive_field(
                torch.ones(3, 3, dtype=torch.bool), torch.ones(4, 4, dtype=torch.bool)
            ),
            ShapeError,
            r"layers\[1\]: expected \(3, 3\) like layers\[0\], got \(4, 4\)",
        ),
    ],
)
def test_bad_connectivities_are_rejected(call, error, message):
    with pytest.raises(error, match=message):
        call()
