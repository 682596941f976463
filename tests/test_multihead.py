"""transformer_course.multihead (chapter 3), against torch.nn.MultiheadAttention."""

import pytest
import torch
from torch import nn

import transformer_course as tc
from transformer_course import multihead as mh
from transformer_course import torch_layers

F64 = torch.float64


def pair(d_model=12, n_heads=3, bias=True, seed=0):
    torch.manual_seed(seed)
    ours = mh.MultiHeadAttention(d_model, n_heads, bias=bias).double()
    return ours, torch_layers.to_torch(ours)


def grads(out, params, upstream):
    return torch.autograd.grad(out, params, upstream)


@pytest.mark.parametrize(("d_model", "n_heads"), [(12, 1), (12, 3), (16, 4), (8, 8)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("fast", [True, False])
def test_equals_torch_multihead_attention(d_model, n_heads, bias, fast):
    ours, reference = pair(d_model, n_heads, bias)
    x = torch.randn(2, 5, d_model, dtype=F64, requires_grad=True)
    out = ours(x) if fast else ours(x, need_weights=True)[0]
    expected, _ = reference(x, x, x, need_weights=False)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    ours_params = [x, ours.qkv_proj.weight, ours.out_proj.weight]
    ref_params = [x, reference.in_proj_weight, reference.out_proj.weight]
    for got, want in zip(
        grads(out, ours_params, upstream),
        grads(expected, ref_params, upstream),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("kind", ["causal", "boolean", "padding"])
def test_equals_torch_with_masks(kind):
    ours, reference = pair(16, 4)
    x = torch.randn(3, 6, 16, dtype=F64, requires_grad=True)
    if kind == "causal":
        out = ours(x, is_causal=True)
        expected, _ = reference(
            x,
            x,
            x,
            attn_mask=nn.Transformer.generate_square_subsequent_mask(6, dtype=F64),
            need_weights=False,
        )
    elif kind == "boolean":
        allowed = torch.rand(6, 6, generator=torch.Generator().manual_seed(1)) > 0.3
        allowed.fill_diagonal_(True)
        out = ours(x, mask=allowed)
        expected, _ = reference(
            x, x, x, attn_mask=~allowed, need_weights=False
        )  # torch: True = blocked
    else:
        keep = torch.ones(3, 6, dtype=torch.bool)
        keep[0, 4:] = False
        keep[2, 1:] = False
        out = ours(x, mask=keep[:, None, None, :])  # (B, 1, 1, N)
        expected, _ = reference(x, x, x, key_padding_mask=~keep, need_weights=False)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    torch.testing.assert_close(
        grads(out, [x], upstream)[0], grads(expected, [x], upstream)[0]
    )


B, H, N = 3, 4, 6


def mask_of_kind(kind):
    """(mask for our layer, mask's value in torch's terms (B·H, N, N), is_causal).

    torch's ``nn.MultiheadAttention`` wants True = blocked and a 3-D mask, so the
    reference mask is combined with the causal one by hand, broadcast and flipped.
    """
    g = torch.Generator().manual_seed(11)
    allowed = torch.rand(N, N, generator=g) > 0.4
    bias = torch.randn(B, 1, N, N, dtype=F64, generator=g).requires_grad_()
    lower = torch.ones(N, N, dtype=torch.bool).tril()  # plain causal mask, N_q = N_k
    padding = torch.ones(B, 1, 1, N, dtype=torch.bool)
    padding[0, ..., 4:] = False
    padding[2] = False  # a sequence that is all padding: every query sees nothing
    mask, is_causal, combined = {
        "none+causal": (None, True, lower),
        "boolean": (allowed, False, allowed),
        "boolean+causal": (allowed, True, allowed & lower),
        "float": (bias, False, bias),
        "float+causal": (bias, True, torch.where(lower, bias, float("-inf"))),
        "padding": (padding, False, padding),
        "padding+causal": (padding, True, padding & lower),
    }[kind]
    combined = combined.expand(B, H, N, N).reshape(B * H, N, N)  # (B·H, N, N)
    return mask, (~combined if combined.dtype == torch.bool else combined), is_causal


MASK_KINDS = [
    "none+causal",
    "boolean",
    "boolean+causal",
    "float",
    "float+causal",
    "padding",
    "padding+causal",
]


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_both_paths_equal_torch_and_each_other_for_every_mask(kind):
    ours, reference = pair(16, H)
    x = torch.randn(B, N, 16, dtype=F64, requires_grad=True)
    mask, torch_mask, is_causal = mask_of_kind(kind)
    fast = ours(x, mask=mask, is_causal=is_causal)
    teaching, weights = ours(x, mask=mask, is_causal=is_causal, need_weights=True)
    expected, _ = reference(x, x, x, attn_mask=torch_mask, need_weights=False)
    torch.testing.assert_close(fast, expected)
    torch.testing.assert_close(teaching, expected)
    upstream = torch.randn_like(fast)
    inputs = [x, mask] if kind.startswith("float") else [x]
    want = grads(expected, [*inputs, reference.in_proj_weight], upstream)
    for out in (fast, teaching):
        got = grads(out, [*inputs, ours.qkv_proj.weight], upstream)
        for g, w in zip(got, want, strict=True):
            assert torch.isfinite(g).all()
            torch.testing.assert_close(g, w)
    if kind.startswith("padding"):  # sequence 2 is all padding: no weights at all
        torch.testing.assert_close(weights[2], torch.zeros(H, N, N, dtype=F64))


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    ("mask", "error", "message"),
    [
        (
            torch.ones(5, 5, dtype=torch.bool),
            tc.ShapeError,
            r"mask: expected a shape broadcastable to the scores \(\.\.\., N_q, N_k\) "
            r"= \(3, 4, 6, 6\), got \(5, 5\)",
        ),
        (
            torch.ones(N, N, dtype=torch.int64),
            TypeError,
            r"mask: expected dtype torch.bool \(True = may attend\) or a "
            r"floating-point dtype \(added to the scores\), got torch.int64",
        ),
        (
            torch.ones(N, N, dtype=torch.uint8),
            TypeError,
            r"got torch.uint8; use mask.bool\(\) for a 0/1 mask",
        ),
        (
            [[True] * N] * N,
            TypeError,
            r"mask: expected a boolean or floating-point torch.Tensor .*, got list",
        ),
    ],
    ids=["shape", "int64", "uint8", "list"],
)
def test_both_paths_reject_bad_masks_alike(
    mask, error, message, is_causal, need_weights
):
    ours, _ = pair(16, H)
    x = torch.randn(B, N, 16, dtype=F64)
    with pytest.raises(error, match=message):
        ours(x, mask=mask, is_causal=is_causal, need_weights=need_weights)


def test_need_weights_returns_each_heads_weights():
    ours, reference = pair(16, 4)
    x = torch.randn(2, 5, 16, dtype=F64)
    _, weights = ours(x, need_weights=True)  # (B, H, N, N)
    assert weights.shape == (2, 4, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5, dtype=F64))
    _, averaged = reference(x, x, x, need_weights=True)  # torch averages the heads
    torch.testing.assert_close(weights.mean(1), averaged)


def test_conversion_both_ways():
    torch.manual_seed(3)
    reference = nn.MultiheadAttention(16, 4, batch_first=True).double()
    ours = torch_layers.from_torch(reference)
    x = torch.randn(2, 7, 16, dtype=F64)
    torch.testing.assert_close(ours(x), reference(x, x, x, need_weights=False)[0])
    back = torch_layers.to_torch(ours)
    torch.testing.assert_close(back(x, x, x)[0], reference(x, x, x)[0])


@pytest.mark.parametrize("bias", [True, False])
def test_sum_over_heads_equals_concat_then_project(bias):
    ours, _ = pair(16, 4, bias)
    x = torch.randn(2, 6, 16, dtype=F64)
    torch.testing.assert_close(mh.sum_over_heads(ours, x), ours(x))
    torch.testing.assert_close(
        mh.sum_over_heads(ours, x, is_causal=True), ours(x, is_causal=True)
    )


def test_value_maps_are_low_rank():
    ours, _ = pair(16, 4)
    maps = mh.head_value_maps(ours)  # (H, D, D)
    assert maps.shape == (4, 16, 16)
    assert all(torch.linalg.matrix_rank(m) <= 4 for m in maps)


def test_one_head_is_chapter_two_self_attention_then_a_projection():
    torch.manual_seed(4)
    ours = mh.MultiHeadAttention(8, 1, bias=False).double()
    single = tc.SelfAttention(8, 8, 8).double()
    with torch.no_grad():
        single.query_proj.weight.copy_(ours.qkv_proj.weight[:8])
        single.key_proj.weight.copy_(ours.qkv_proj.weight[8:16])
        single.value_proj.weight.copy_(ours.qkv_proj.weight[16:])
        ours.out_proj.weight.copy_(torch.eye(8))
    x = torch.randn(3, 5, 8, dtype=F64)
    torch.testing.assert_close(ours(x), single(x))


def test_split_and_merge_heads_are_inverse_and_take_feature_blocks():
    x = torch.arange(2 * 3 * 8, dtype=F64).view(2, 3, 8)  # (B, N, D)
    heads = mh.split_heads(x, 4)  # (B, H, N, d) = (2, 4, 3, 2)
    assert heads.shape == (2, 4, 3, 2)
    torch.testing.assert_close(heads[1, 2, 0], x[1, 0, 4:6])
    torch.testing.assert_close(mh.merge_heads(heads), x)


def test_counts_match_the_module_and_do_not_depend_on_heads():
    for n_heads in (1, 2, 4, 8):
        module = mh.MultiHeadAttention(64, n_heads)
        assert sum(p.numel() for p in module.parameters()) == mh.parameter_count(
            64, n_heads
        )
    assert mh.parameter_count(64, 8, bias=False) == 4 * 64 * 64
    assert mh.flop_count(64, 4, 10) == 8 * 10 * 64 * 64 + 4 * 100 * 64


def test_dropout_only_while_training():
    torch.manual_seed(5)
    ours = mh.MultiHeadAttention(16, 4, dropout=0.5).double()
    x = torch.randn(2, 6, 16, dtype=F64)
    ours.eval()
    torch.testing.assert_close(ours(x), ours(x))
    ours.train()
    assert not torch.allclose(ours(x), ours(x))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: mh.MultiHeadAttention(10, 4),
            r"divisible by n_heads: got d_model=10, n_heads=4 "
            r"\(d_model % n_heads = 2\)",
        ),
        (
            lambda: mh.MultiHeadAttention(12, 0),
            r"n_heads: expected a positive int, got 0",
        ),
        (
            lambda: mh.MultiHeadAttention(12, -3),
            r"n_heads: expected a positive int, got -3",
        ),
        (
            lambda: mh.MultiHeadAttention(12, 2.0),
            r"n_heads: expected a positive int, got 2.0",
        ),
        (
            lambda: mh.MultiHeadAttention(0, 4),
            r"d_model: expected a positive int, got 0",
        ),
        (
            lambda: mh.MultiHeadAttention(12, 4, dropout=1.5),
            r"dropout: expected a probability in \[0, 1\], got 1.5",
        ),
        (lambda: mh.parameter_count(12, 0), r"n_heads: expected a positive int, got 0"),
        (lambda: mh.parameter_count(10, 4), r"got d_model=10, n_heads=4"),
        (lambda: mh.flop_count(12, 0, 5), r"n_heads: expected a positive int, got 0"),
        (lambda: mh.flop_count(12, 4, -1), r"n_tokens: expected an int ≥ 0, got -1"),
        (
            lambda: mh.split_heads(torch.zeros(1, 2, 10), 0),
            r"n_heads: expected a positive int, got 0",
        ),
        (
            lambda: mh.split_heads(torch.zeros(1, 2, 10), 4),
            r"x: width 10 is not divisible by n_heads = 4",
        ),
    ],
)
def test_bad_head_counts_name_the_numbers(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("need_weights", [False, True])
def test_empty_sequences_are_rejected(need_weights):
    with pytest.raises(
        ValueError,
        match=r"x: expected at least one token \(a sequence of length ≥ 1\), "
        r"got shape \(2, 0, 16\)",
    ):
        mh.MultiHeadAttention(16, 4)(torch.zeros(2, 0, 16), need_weights=need_weights)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: mh.MultiHeadAttention(16, 4)(torch.zeros(2, 5, 12)),
            tc.ShapeError,
            r"x: expected shape \(B, N, D\) with D=16, got \(2, 5, 12\)",
        ),
        (
            lambda: mh.MultiHeadAttention(4, 2)([[[0.0] * 4]]),
            TypeError,
            r"x: expected a torch.Tensor of shape \(B N D\), got list",
        ),
        (
            lambda: mh.split_heads([[[0.0] * 4]], 2),
            TypeError,
            r"x: expected a torch.Tensor of shape \(B N D\), got list",
        ),
        (
            lambda: mh.merge_heads(torch.zeros(2, 3, 4)),
            tc.ShapeError,
            r"x: expected shape \(B, H, N, d\), got \(2, 3, 4\)",
        ),
    ],
)
def test_wrong_inputs_name_what_was_expected(call, error, message):
    with pytest.raises(error, match=message):
        call()


# --- feature mixing (chapter 3): the Jacobian through the values ----------


def jacobian(fn, x):
    """(B, N, D) -> (B, N, D): Jacobian blocks (B, N, N, D, D) within each sequence."""
    full = torch.autograd.functional.jacobian(fn, x)  # (B, N, D, B, N, D)
    blocks = torch.stack(
        [full[b, :, :, b] for b in range(x.shape[0])]
    )  # (B, N, D, N, D)
    return blocks.permute(0, 1, 3, 2, 4)  # (B, N, N, D, D): [b, n, m, i, j]


@pytest.mark.parametrize(("d_model", "n_heads"), [(8, 1), (12, 3), (16, 4)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_feature_mixing_is_torchs_jacobian_with_respect_to_the_values(
    d_model, n_heads, is_causal
):
    """Torch's layer takes values apart from queries and keys: its Jacobian in the
    value input, with queries and keys fixed, is exactly Σ_h A_h[n, m] W_OV^h."""
    ours, reference = pair(d_model, n_heads, seed=3)
    x = torch.randn(2, 5, d_model, dtype=F64)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=F64)
    mask = causal if is_causal else None
    expected = jacobian(
        lambda v: reference(x, x, v, attn_mask=mask, need_weights=False)[0], x
    )
    got = mh.feature_mixing(ours, x, is_causal=is_causal)
    assert got.shape == (2, 5, 5, d_model, d_model)
    torch.testing.assert_close(got, expected)


def test_feature_mixing_is_the_whole_jacobian_when_the_weights_are_constant():
    ours, _ = pair(12, 3, seed=4)
    with torch.no_grad():
        ours.qkv_proj.weight[:24].zero_()  # W_q = W_k = 0: uniform weights 1/N
    x = torch.randn(2, 6, 12, dtype=F64)
    torch.testing.assert_close(mh.feature_mixing(ours, x), jacobian(ours, x))
    maps = mh.head_value_maps(ours).sum(0) / 6  # Σ_h W_OV^h / N, for every pair
    torch.testing.assert_close(mh.feature_mixing(ours, x), maps.expand(2, 6, 6, 12, 12))


def test_identity_values_and_output_mix_no_features():
    """W_v = W_O = I: W_OV^h keeps head h's own features, so every block is diagonal,
    and feature i of head h is averaged with that head's weights A_h[n, m]."""
    ours, _ = pair(12, 3, bias=False, seed=5)
    with torch.no_grad():
        ours.qkv_proj.weight[24:] = torch.eye(12, dtype=F64)
        ours.out_proj.weight.copy_(torch.eye(12, dtype=F64))
    x = torch.randn(2, 4, 12, dtype=F64)
    blocks = mh.feature_mixing(ours, x)  # (B, N, N, D, D)
    off_diagonal = ~torch.eye(12, dtype=torch.bool)
    assert (blocks[..., off_diagonal] == 0).all()
    _, weights = ours(x, need_weights=True)  # (B, H, N, N)
    per_feature = weights.repeat_interleave(4, dim=1)  # (B, D, N, N): d = 4
    torch.testing.assert_close(
        blocks.diagonal(dim1=-2, dim2=-1), per_feature.permute(0, 2, 3, 1)
    )


def test_diagonal_attention_is_a_linear_map_per_token():
    """Turner: keeping only the diagonal of A interacts each token with itself."""
    ours, _ = pair(12, 3, seed=6)
    x = torch.randn(2, 5, 12, dtype=F64)
    only_itself = torch.eye(5, dtype=torch.bool)
    maps = mh.head_value_maps(ours).sum(0)  # (D, D)
    value_bias = ours.qkv_proj.bias[24:] @ ours.out_proj.weight.T
    expected = x @ maps.T + value_bias + ours.out_proj.bias
    torch.testing.assert_close(ours(x, mask=only_itself), expected)


# --- rotary positions (chapter 5) through both paths ----------------------


def rotary_pair(d_model=16, n_heads=4, seed=7):
    """A float64 layer with rotary positions, and the same weights without."""
    torch.manual_seed(seed)
    rotary = tc.RotaryEmbedding(d_model // n_heads)
    ours = mh.MultiHeadAttention(d_model, n_heads, rotary=rotary).double()
    plain = mh.MultiHeadAttention(d_model, n_heads).double()
    plain.load_state_dict(ours.state_dict())  # rotary adds no parameters
    return ours, plain


def rotary_by_hand(module, x, offset, is_causal):
    """Split heads, turn q and k (complex form), torch's kernel, merge, out-proj."""
    B_, N_, D_ = x.shape
    H_, d_ = module.n_heads, module.d_head
    q, k, v = nn.functional.linear(
        x, module.qkv_proj.weight, module.qkv_proj.bias
    ).chunk(3, -1)
    q, k, v = (
        t.view(B_, N_, H_, d_).transpose(1, 2) for t in (q, k, v)
    )  # (B, H, N, d)
    angles = tc.position_angles(N_, d_, offset=offset)  # (N, d/2)
    q, k = tc.apply_rotary_complex(q, angles), tc.apply_rotary_complex(k, angles)
    heads = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    merged = heads.transpose(1, 2).reshape(B_, N_, D_)  # (B, N, D)
    return nn.functional.linear(merged, module.out_proj.weight, module.out_proj.bias)


@pytest.mark.parametrize("offset", [0, 5])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("fast", [True, False])
def test_rotary_attention_equals_a_manual_computation(offset, is_causal, fast):
    ours, _ = rotary_pair()
    x = torch.randn(B, N, 16, dtype=F64, requires_grad=True)
    out = ours(x, is_causal=is_causal, offset=offset, need_weights=not fast)
    out = out if fast else out[0]
    expected = rotary_by_hand(ours, x, offset, is_causal)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    params = [x, ours.qkv_proj.weight, ours.qkv_proj.bias, ours.out_proj.weight]
    for got, want in zip(
        grads(out, params, upstream), grads(expected, params, upstream), strict=True
    ):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("is_causal", [False, True])
def test_rotary_attention_does_not_depend_on_the_offset(is_causal):
    """Only relative positions reach the scores: shifting all tokens changes nothing."""
    ours, plain = rotary_pair()
    x = torch.randn(B, N, 16, dtype=F64)
    out = ours(x, is_causal=is_causal)
    torch.testing.assert_close(ours(x, is_causal=is_causal, offset=100), out)
    assert not torch.allclose(out, plain(x, is_causal=is_causal))
    torch.testing.assert_close(
        plain(x, is_causal=is_causal, offset=100), plain(x, is_causal=is_causal)
    )  # without rotary the offset does nothing


def test_rotary_sum_over_heads_and_weights_match_the_layer():
    ours, _ = rotary_pair()
    x = torch.randn(B, N, 16, dtype=F64)
    torch.testing.assert_close(
        mh.sum_over_heads(ours, x, is_causal=True), ours(x, is_causal=True)
    )
    fast = ours(x, mask=mask_of_kind("boolean")[0])
    teaching, _ = ours(x, mask=mask_of_kind("boolean")[0], need_weights=True)
    torch.testing.assert_close(fast, teaching)


def test_rotary_keeps_the_state_dict_and_the_defaults():
    ours, plain = rotary_pair()
    assert plain.rotary is None
    assert list(ours.state_dict()) == list(plain.state_dict())
    assert isinstance(ours.rotary, tc.RotaryEmbedding)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: mh.MultiHeadAttention(16, 4, rotary=tc.RotaryEmbedding(8)),
            r"rotary: expected a rotary embedding of head_dim d = d_model / n_heads "
            r"= 4, got head_dim=8",
        ),
        (
            lambda: torch_layers.to_torch(rotary_pair()[0]),
            r"to_torch: nn.MultiheadAttention has no rotary positions",
        ),
        (
            lambda: mh.MultiHeadAttention(16, 4)(torch.zeros(1, 3, 16), offset=-1),
            r"offset: expected an int ≥ 0, got -1",
        ),
    ],
)
def test_rotary_misuse_names_the_numbers(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("masked", [False, True])
def test_the_minimal_forward_equals_torch_and_the_module(masked):
    """Chapter 3, §3.3: the twelve-line version gives torch's numbers and
    gradients, and the module's."""
    ours, reference = pair(16, 4)
    x = torch.randn(3, 6, 16, dtype=F64, requires_grad=True)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril() if masked else None
    out = mh.minimal_forward(ours, x, mask=allowed)
    expected, _ = reference(
        x,
        x,
        x,
        attn_mask=None if allowed is None else ~allowed,  # torch: True = blocked
        need_weights=False,
    )
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, ours(x, mask=allowed))
    upstream = torch.randn_like(out)
    for got, want in zip(
        grads(out, [x, ours.qkv_proj.weight, ours.out_proj.weight], upstream),
        grads(
            expected, [x, reference.in_proj_weight, reference.out_proj.weight], upstream
        ),
        strict=True,
    ):
        torch.testing.assert_close(got, want)
