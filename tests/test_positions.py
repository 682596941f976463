"""transformer_course.positions (chapter 5): sinusoidal, learned, rotary, ALiBi."""

import math

import pytest
import torch
import torch.nn.functional as F

import transformer_course as tc
from transformer_course import positions as pos

F64 = torch.float64
B, H, N, d = 2, 4, 7, 8
D = H * d


# --- sinusoidal positions (Vaswani et al.; lecture notes §9.5.1) ------------


def sinusoid_by_hand(n_tokens, d_model, base, offset):
    """PE[n, 2k] = sin(n / base^(2k/D)), PE[n, 2k+1] = cos(...), with Python math."""
    rows = []
    for n in range(offset, offset + n_tokens):
        row = []
        for k in range(d_model // 2):
            angle = n / base ** (2 * k / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=F64).reshape(n_tokens, d_model)


@pytest.mark.parametrize(
    ("n_tokens", "d_model", "base", "offset"),
    [(1, 2, 10000.0, 0), (9, 16, 10000.0, 0), (5, 6, 100.0, 3), (4, 32, 1e4, 2000)],
)
def test_sinusoidal_table_is_the_formula_elementwise(n_tokens, d_model, base, offset):
    table = tc.sinusoidal_positions(n_tokens, d_model, base, offset, dtype=F64)
    assert table.shape == (n_tokens, d_model)
    expected = sinusoid_by_hand(n_tokens, d_model, base, offset)
    torch.testing.assert_close(table, expected, rtol=0, atol=1e-12)


def test_sinusoidal_table_has_the_default_dtype_and_rows_of_norm_root_half_d():
    table = tc.sinusoidal_positions(50, 12)
    assert table.dtype == torch.get_default_dtype()
    torch.testing.assert_close(
        tc.sinusoidal_positions(50, 12, dtype=F64).norm(dim=-1),
        torch.full((50,), math.sqrt(6), dtype=F64),
    )


@pytest.mark.parametrize(("d_model", "base"), [(16, 10000.0), (10, 50.0)])
def test_sinusoidal_dot_products_depend_only_on_the_distance(d_model, base):
    table = tc.sinusoidal_positions(30, d_model, base, dtype=F64)  # (N, D)
    gram = table @ table.T  # (N, N): PE(n) · PE(m)
    torch.testing.assert_close(gram[1:, 1:], gram[:-1, :-1])  # Toeplitz
    n = torch.arange(30, dtype=F64)
    omega = base ** (-torch.arange(0, d_model, 2, dtype=F64) / d_model)  # (D/2,)
    distance = n[:, None] - n[None, :]  # (N, N)
    torch.testing.assert_close(
        gram, torch.cos(distance[..., None] * omega).sum(-1)
    )  # Σ_k cos((n − m) ω_k)


@pytest.mark.parametrize("shift", [0, 1, 3, 17, -2])
@pytest.mark.parametrize("d_model", [2, 8, 20])
def test_shift_matrix_moves_every_position_by_the_same_rotation(shift, d_model):
    R = tc.sinusoidal_shift_matrix(shift, d_model, dtype=F64)  # (D, D)
    assert R.shape == (d_model, d_model)
    table = tc.sinusoidal_positions(40, d_model, offset=10, dtype=F64)  # n = 10..49
    for n in (2, 5, 20):
        torch.testing.assert_close(R @ table[n], table[n + shift])  # column form
    shifted = tc.sinusoidal_positions(40, d_model, offset=10 + shift, dtype=F64)
    torch.testing.assert_close(table @ R.T, shifted)  # rows: table[n + j] = table[n] Rᵀ
    torch.testing.assert_close(R @ R.T, torch.eye(d_model, dtype=F64))  # orthogonal


def test_shift_matrices_are_block_diagonal_rotations_that_compose():
    R = tc.sinusoidal_shift_matrix(5, 8, dtype=F64)
    blocks = torch.stack([R[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] for k in range(4)])
    torch.testing.assert_close(torch.block_diag(*blocks), R)  # zero off the blocks
    torch.testing.assert_close(torch.linalg.det(blocks), torch.ones(4, dtype=F64))
    torch.testing.assert_close(
        tc.sinusoidal_shift_matrix(2, 8, dtype=F64)
        @ tc.sinusoidal_shift_matrix(3, 8, dtype=F64),
        R,
    )  # R_2 R_3 = R_5
    torch.testing.assert_close(
        tc.sinusoidal_shift_matrix(0, 8, dtype=F64), torch.eye(8, dtype=F64)
    )


def test_position_angles_are_shared_by_sinusoids_and_rotary():
    angles = tc.position_angles(6, 10, base=500.0, offset=4)  # (N, D/2)
    assert angles.shape == (6, 5)
    assert angles.dtype == F64
    table = tc.sinusoidal_positions(6, 10, base=500.0, offset=4, dtype=F64)
    torch.testing.assert_close(table[:, 0::2], angles.sin())
    torch.testing.assert_close(table[:, 1::2], angles.cos())
    torch.testing.assert_close(
        tc.RotaryEmbedding(10, base=500.0).angles(6, offset=4), angles
    )


# --- added position modules: sinusoidal and learned ----------------------


def test_learned_positions_add_rows_offset_to_offset_plus_n():
    torch.manual_seed(0)
    table = tc.LearnedPositions(max_len=12, d_model=D).double()
    assert table.weight.shape == (12, D)
    x = torch.randn(B, 5, D, dtype=F64)
    out = table(x, offset=3)
    torch.testing.assert_close(out, x + table.weight[3:8])
    torch.testing.assert_close(table.positions(5, offset=3), table.weight[3:8])
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, table.weight, upstream)
    expected = torch.zeros(12, D, dtype=F64)
    expected[3:8] = upstream.sum(0)  # each used row gets the batch's gradient
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize(
    ("n_tokens", "offset", "message"),
    [
        (9, 0, r"offset \+ N = 0 \+ 9 = 9 exceeds max_len = 8"),
        (6, 3, r"positions 3\.\.8: offset \+ N = 3 \+ 6 = 9 exceeds max_len = 8"),
    ],
)
def test_learned_positions_name_both_numbers_past_the_table(n_tokens, offset, message):
    table = tc.LearnedPositions(8, D)
    with pytest.raises(ValueError, match=message):
        table(torch.zeros(1, n_tokens, D), offset=offset)


def test_learned_table_set_to_sinusoids_equals_sinusoidal_positions():
    learned = tc.LearnedPositions(20, 12).double()
    with torch.no_grad():
        learned.weight.copy_(tc.sinusoidal_positions(20, 12, dtype=F64))
    fixed = tc.SinusoidalPositions(12)
    x = torch.randn(B, 6, 12, dtype=F64)
    torch.testing.assert_close(fixed(x, offset=9), learned(x, offset=9))
    torch.testing.assert_close(fixed.positions(6, 9).double(), learned.positions(6, 9))
    assert not list(fixed.parameters())  # nothing to learn
    assert fixed(x.float()).dtype == torch.float32


@pytest.mark.parametrize(
    "module", [tc.LearnedPositions(8, 12), tc.SinusoidalPositions(12)]
)
def test_position_modules_name_a_wrong_width(module):
    with pytest.raises(
        tc.ShapeError,
        match=r"x: expected shape \(B, N, D\) with D=12, got \(2, 3, 10\)",
    ):
        module(torch.zeros(2, 3, 10))


def test_attention_without_positions_ignores_word_order():
    """Permuting the tokens permutes the outputs (chapter 3); rotary breaks that."""
    torch.manual_seed(1)
    plain = tc.MultiHeadAttention(D, H).double()
    rotary = tc.MultiHeadAttention(D, H, rotary=tc.RotaryEmbedding(d)).double()
    rotary.load_state_dict(plain.state_dict())
    x = torch.randn(B, N, D, dtype=F64)
    perm = torch.randperm(N)
    torch.testing.assert_close(plain(x[:, perm]), plain(x)[:, perm])
    assert not torch.allclose(rotary(x[:, perm]), rotary(x)[:, perm])


# --- rotary positions (RoPE) ----------------------------------------------


def rotate_by_hand(x, positions, base=10000.0):
    """RoFormer's complex form written independently: z_i e^{i n θ_i}, θ_i = base^(−2i/d)."""
    width = x.shape[-1]
    theta = base ** (-torch.arange(0, width, 2, dtype=F64) / width)  # (d/2,)
    angles = torch.as_tensor(positions, dtype=F64)[:, None] * theta  # (N, d/2)
    z = torch.complex(x[..., 0::2], x[..., 1::2])  # pairs (2i, 2i+1) as complex
    z = z * torch.polar(torch.ones_like(angles), angles)
    return torch.stack((z.real, z.imag), dim=-1).flatten(-2)  # (..., N, d)


@pytest.mark.parametrize(("shape", "offset"), [((5, 2), 0), ((2, 3, 6, 8), 11)])
def test_apply_rotary_equals_the_complex_form_values_and_gradients(shape, offset):
    torch.manual_seed(2)
    x = torch.randn(*shape, dtype=F64, requires_grad=True)
    n_tokens, width = shape[-2:]
    angles = tc.position_angles(n_tokens, width, offset=offset)
    real = tc.apply_rotary(x, angles)
    complex_form = tc.apply_rotary_complex(x, angles)
    by_hand = rotate_by_hand(x, range(offset, offset + n_tokens))
    torch.testing.assert_close(real, complex_form)
    torch.testing.assert_close(real, by_hand)
    upstream = torch.randn_like(real)
    (want,) = torch.autograd.grad(by_hand, x, upstream)
    for out in (real, complex_form):
        torch.testing.assert_close(torch.autograd.grad(out, x, upstream)[0], want)


def test_rotation_keeps_lengths_and_position_zero_keeps_everything():
    torch.manual_seed(3)
    x = torch.randn(3, 9, 10, dtype=F64)
    rotated = tc.apply_rotary(x, tc.position_angles(9, 10))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rotated[:, 0], x[:, 0])  # angle 0: no turn


def test_interleaved_pairs_equal_the_half_split_form_after_a_permutation():
    """GPT-NeoX / Hugging Face LLaMA rotate feature i with i + d/2 ("rotate_half").

    Reordering the features as (0, 2, 4, ..., 1, 3, 5, ...) turns one form into
    the other, so the learned W_q, W_k of either can be permuted into the other.
    """
    torch.manual_seed(4)
    x = torch.randn(B, H, N, d, dtype=F64)
    angles = tc.position_angles(N, d)  # (N, d/2)
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)  # (N, d)

    def rotate_half(t):
        first, second = t[..., : d // 2], t[..., d // 2 :]
        return torch.cat((-second, first), dim=-1)

    def half_split(t):  # the GPT-NeoX / LLaMA (Hugging Face) rotation
        return t * cos + rotate_half(t) * sin

    to_halves = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))
    torch.testing.assert_close(
        tc.apply_rotary(x, angles)[..., to_halves], half_split(x[..., to_halves])
    )


@pytest.mark.parametrize("seed", range(5))
def test_rotary_scores_depend_only_on_the_relative_position(seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, d, dtype=F64, generator=g)  # one query, one key vector
    m, n, shift = (int(v) for v in torch.randint(0, 500, (3,), generator=g))

    def turned(vector, position):
        return tc.apply_rotary(vector[None], tc.position_angles(1, d, offset=position))[
            0
        ]

    score = turned(q, m) @ turned(k, n)
    torch.testing.assert_close(turned(q, m + shift) @ turned(k, n + shift), score)
    if m >= n:  # only m − n matters: put the key at 0 and the query at m − n
        torch.testing.assert_close(turned(q, m - n) @ k, score)


def test_rotary_score_matrix_is_toeplitz_and_offset_free():
    """With the same q in every row and the same k in every row, the scores
    q_m · k_n form a Toeplitz matrix: one value per m − n."""
    torch.manual_seed(5)
    rotary = tc.RotaryEmbedding(d)
    q = torch.randn(d, dtype=F64).expand(B, H, N, d)
    k = torch.randn(d, dtype=F64).expand(B, H, N, d)
    scores = []
    for offset in (0, 13):
        q_turned, k_turned = rotary(q, k, offset=offset)
        scores.append(q_turned @ k_turned.transpose(-2, -1))  # (B, H, N, N)
    torch.testing.assert_close(scores[0][..., 1:, 1:], scores[0][..., :-1, :-1])
    torch.testing.assert_close(scores[1], scores[0])  # the offset cancels


@pytest.mark.parametrize("offset", [1, 4, 9])
def test_rotating_at_an_offset_equals_slicing_a_longer_rotation(offset):
    torch.manual_seed(6)
    rotary = tc.RotaryEmbedding(d, max_len=16)
    q_long, k_long = torch.randn(2, B, H, offset + N, d, dtype=F64)
    q_all, k_all = rotary(q_long, k_long)
    q_new, k_new = rotary(q_long[:, :, offset:], k_long[:, :, offset:], offset=offset)
    torch.testing.assert_close(q_new, q_all[:, :, offset:])
    torch.testing.assert_close(k_new, k_all[:, :, offset:])


def test_rotary_keeps_dtype_and_shapes_and_has_no_state():
    rotary = tc.RotaryEmbedding(d)
    assert not list(rotary.parameters())
    assert not list(rotary.buffers())
    q, k = torch.randn(2, B, H, N, d, dtype=F64)
    q32, k32 = rotary(q.float(), k.float(), offset=1000)
    assert (q32.dtype, q32.shape, k32.shape) == (torch.float32, q.shape, k.shape)
    q64, _ = rotary(q, k, offset=1000)
    torch.testing.assert_close(q32, q64.float())  # angles in float64 either way


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: tc.RotaryEmbedding(7),
            ValueError,
            r"head_dim: expected an even positive int \(features are rotated in "
            r"pairs\), got 7",
        ),
        (
            lambda: tc.RotaryEmbedding(8)(torch.zeros(2, 5, 8), torch.zeros(2, 5, 8)),
            tc.ShapeError,
            r"q: expected shape \(B, H, N, d\) with d=8, got \(2, 5, 8\): needs 4 "
            r"dimensions, has 3",
        ),
        (
            lambda: tc.RotaryEmbedding(8)(
                torch.zeros(1, 2, 5, 6), torch.zeros(1, 2, 5, 6)
            ),
            tc.ShapeError,
            r"q: expected shape \(B, H, N, d\) with d=8, got \(1, 2, 5, 6\)",
        ),
        (
            lambda: tc.RotaryEmbedding(8)(
                torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 4, 8)
            ),
            tc.ShapeError,
            r"k: expected shape \(B, H, N, d\) with .*N=5.*, got \(1, 2, 4, 8\)",
        ),
        (
            lambda: tc.RotaryEmbedding(8, max_len=10)(
                torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8), offset=6
            ),
            ValueError,
            r"positions 6\.\.10: offset \+ N = 6 \+ 5 = 11 exceeds max_len = 10",
        ),
        (
            lambda: tc.RotaryEmbedding(8)(
                torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8), offset=-1
            ),
            ValueError,
            r"offset: expected an int ≥ 0, got -1",
        ),
        (
            lambda: tc.apply_rotary(torch.zeros(3, 5), tc.position_angles(3, 4)),
            tc.ShapeError,
            r"x: expected an even width d \(features are rotated in pairs\), "
            r"got shape \(3, 5\)",
        ),
        (
            lambda: tc.apply_rotary(torch.zeros(3, 8), tc.position_angles(3, 6)),
            tc.ShapeError,
            r"angles: expected shape \(N, h\) with N=3, h=4, got \(3, 3\)",
        ),
        (
            lambda: tc.apply_rotary(
                torch.zeros(3, 8, dtype=torch.int64), torch.zeros(3, 4)
            ),
            TypeError,
            r"x: expected a floating-point dtype, got torch.int64",
        ),
        (
            lambda: tc.sinusoidal_positions(4, 7),
            ValueError,
            r"d_model: expected an even positive int \(features come in \(sin, cos\) "
            r"pairs\), got 7",
        ),
        (
            lambda: tc.sinusoidal_positions(4, 8, offset=-2),
            ValueError,
            r"offset: expected an int ≥ 0, got -2",
        ),
        (
            lambda: tc.sinusoidal_positions(4, 8, base=0.0),
            ValueError,
            r"base: expected a number > 0, got 0.0",
        ),
        (
            lambda: tc.sinusoidal_shift_matrix(1.5, 8),
            ValueError,
            r"shift: expected an int, got 1.5",
        ),
        (
            lambda: tc.LearnedPositions(0, 8),
            ValueError,
            r"max_len: expected a positive int, got 0",
        ),
        (
            lambda: tc.alibi_slopes(0),
            ValueError,
            r"n_heads: expected a positive int, got 0",
        ),
    ],
    ids=[
        "odd head_dim",
        "rank 3",
        "wrong d",
        "k length",
        "max_len",
        "negative offset",
        "odd x width",
        "angles shape",
        "integer x",
        "odd D",
        "negative sinusoid offset",
        "base",
        "shift",
        "max_len 0",
        "slopes",
    ],
)
def test_wrong_inputs_name_what_was_expected(call, error, message):
    with pytest.raises(error, match=message):
        call()


# --- ALiBi: a bias on the scores, through the mask ------------------------


def press_slopes(n):
    """The slopes as written in Press et al.'s code (github.com/ofirpress/attention_with_linear_biases)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + press_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


def test_alibi_slopes_for_eight_heads_are_powers_of_one_half():
    torch.testing.assert_close(
        tc.alibi_slopes(8, dtype=F64), 2.0 ** -torch.arange(1, 9, dtype=F64)
    )


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 5, 6, 12, 16, 24])
def test_alibi_slopes_follow_the_authors_code(n_heads):
    slopes = tc.alibi_slopes(n_heads, dtype=F64)
    assert slopes.shape == (n_heads,)
    torch.testing.assert_close(slopes, torch.tensor(press_slopes(n_heads), dtype=F64))


@pytest.mark.parametrize(("n_queries", "n_keys"), [(6, None), (1, 1), (3, 7)])
def test_alibi_bias_is_minus_slope_times_distance(n_queries, n_keys):
    bias = tc.alibi_bias(n_queries, 4, n_keys, dtype=F64)
    n_keys = n_keys or n_queries
    assert bias.shape == (4, n_queries, n_keys)
    slopes = tc.alibi_slopes(4, dtype=F64)
    first = n_keys - n_queries  # queries are the last N_q positions
    for h in range(4):
        for i in range(n_queries):
            for j in range(n_keys):
                assert bias[h, i, j] == -slopes[h] * abs(first + i - j)


def test_causal_alibi_is_press_et_al_s_causal_form():
    """With is_causal, −m|i − j| on j ≤ i is −m(i − j); and, since softmax
    ignores a constant per row, the same weights as the authors' bias m·j."""
    bias = tc.alibi_bias(N, H, dtype=F64)
    slopes = tc.alibi_slopes(H, dtype=F64)[:, None, None]
    i, j = torch.arange(N, dtype=F64)[:, None], torch.arange(N, dtype=F64)[None, :]
    lower = torch.ones(N, N, dtype=torch.bool).tril()
    torch.testing.assert_close(bias[:, lower], (-slopes * (i - j))[:, lower])
    scores = torch.randn(B, H, N, N, dtype=F64)
    ours = tc.attention_weights(
        torch.eye(N, dtype=F64).expand(B, H, N, N),
        scores.transpose(-2, -1),
        mask=bias,
        scale=1.0,
        is_causal=True,
    )  # q = I, k = scoresᵀ: q kᵀ = scores
    authors = (scores + slopes * j).masked_fill(~lower, float("-inf")).softmax(-1)
    torch.testing.assert_close(ours, authors)


def manual_attention(module, x, attn_mask=None, is_causal=False):
    """Split heads, F.scaled_dot_product_attention, merge, out-proj, by hand."""
    batch, n_tokens, _ = x.shape
    q, k, v = F.linear(x, module.qkv_proj.weight, module.qkv_proj.bias).chunk(3, -1)
    q, k, v = (t.view(batch, n_tokens, H, d).transpose(1, 2) for t in (q, k, v))
    heads = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal
    )  # (B, H, N, d)
    merged = heads.transpose(1, 2).reshape(batch, n_tokens, D)
    return F.linear(merged, module.out_proj.weight, module.out_proj.bias)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_alibi_through_multihead_attention_equals_torchs_kernel(
    is_causal, need_weights
):
    torch.manual_seed(7)
    module = tc.MultiHeadAttention(D, H).double()
    x = torch.randn(B, N, D, dtype=F64, requires_grad=True)
    bias = tc.alibi_bias(N, H, dtype=F64)  # (H, N, N), broadcast over B
    out = module(x, mask=bias, is_causal=is_causal, need_weights=need_weights)
    out = out[0] if need_weights else out
    lower = torch.ones(N, N, dtype=torch.bool).tril()
    torch_mask = bias.masked_fill(~lower, float("-inf")) if is_causal else bias
    expected = manual_attention(module, x, attn_mask=torch_mask)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    params = [x, module.qkv_proj.weight, module.out_proj.weight]
    got = torch.autograd.grad(out, params, upstream)
    want = torch.autograd.grad(expected, params, upstream)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_alibi_weights_decay_with_distance_when_the_scores_are_equal():
    module = tc.MultiHeadAttention(D, H).double()
    with torch.no_grad():
        module.qkv_proj.weight[: 2 * D].zero_()  # W_q = W_k = 0: equal scores
        module.qkv_proj.bias.zero_()
    x = torch.randn(1, N, D, dtype=F64)
    _, weights = module(x, mask=tc.alibi_bias(N, H, dtype=F64), need_weights=True)
    expected = torch.softmax(tc.alibi_bias(N, H, dtype=F64), dim=-1)  # (H, N, N)
    torch.testing.assert_close(weights[0], expected)
    assert (
        weights[0, :, 0, :-1] > weights[0, :, 0, 1:]
    ).all()  # nearer keys weigh more


def test_alibi_in_a_block_is_the_blocks_mask():
    torch.manual_seed(8)
    block = tc.Block(tc.BlockConfig(D, H)).double()
    x = torch.randn(B, N, D, dtype=F64)
    bias = tc.alibi_bias(N, H, dtype=F64)
    h = x + manual_attention(block.attn, block.norm_1(x), attn_mask=bias)
    expected = h + block.mlp(block.norm_2(h))
    torch.testing.assert_close(block(x, mask=bias), expected)


@pytest.mark.parametrize("name", pos.__all__)
def test_every_public_object_names_chapter_five(name):
    doc = getattr(pos, name).__doc__
    assert doc.startswith("Chapter 5"), f"{name}: {doc[:40]!r}"
