"""transformer_course.block (chapter 4), against torch.nn.TransformerEncoderLayer."""

import pytest
import torch
from torch import nn

import transformer_course as tc
from transformer_course import block as blk
from transformer_course import torch_layers

F64 = torch.float64
B, N, D, H = 3, 6, 16, 4


def torch_layer(norm_first=True, activation="gelu", bias=True, seed=0):
    """A float64 nn.TransformerEncoderLayer with random weights (its norms too)."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        D,
        H,
        dim_feedforward=24,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        bias=bias,
        dtype=F64,
    )
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            for p in norm.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return layer


def masks(kind):
    """(our mask, our is_causal, torch's src_mask, torch's src_key_padding_mask).

    Ours: True = may attend. Torch's: True = blocked.
    """
    g = torch.Generator().manual_seed(3)
    allowed = torch.rand(N, N, generator=g) > 0.4
    allowed.fill_diagonal_(True)  # every query sees at least itself
    keep = torch.ones(B, N, dtype=torch.bool)
    keep[0, 4:] = False
    keep[2, 2:] = False
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    return {
        "none": (None, False, None, None),
        "boolean": (allowed, False, ~allowed, None),
        "padding": (keep[:, None, None, :], False, None, ~keep),  # (B, 1, 1, N)
        "causal": (None, True, ~causal, None),
        "causal+padding": (keep[:, None, None, :], True, ~causal, ~keep),
    }[kind]


def assert_same_outputs_and_gradients(ours, layer, out, expected, x):
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    pairs = [
        (x, x),
        (ours.attn.qkv_proj.weight, layer.self_attn.in_proj_weight),
        (ours.attn.out_proj.bias, layer.self_attn.out_proj.bias),
        (ours.mlp.up_proj.weight, layer.linear1.weight),
        (ours.mlp.down_proj.bias, layer.linear2.bias),
        (ours.norm_1.weight, layer.norm1.weight),
        (ours.norm_2.bias, layer.norm2.bias),
    ]
    got = torch.autograd.grad(out, [a for a, _ in pairs], upstream)
    want = torch.autograd.grad(expected, [b for _, b in pairs], upstream)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize(
    "kind", ["none", "boolean", "padding", "causal", "causal+padding"]
)
def test_block_equals_torch_encoder_layer(norm_first, activation, kind):
    layer = torch_layer(norm_first, activation)
    ours = torch_layers.from_torch(layer)
    assert ours.config.norm_first is norm_first
    mask, is_causal, src_mask, padding = masks(kind)
    x = torch.randn(B, N, D, dtype=F64, requires_grad=True)
    out = ours(x, mask=mask, is_causal=is_causal)
    expected = layer(x, src_mask=src_mask, src_key_padding_mask=padding)
    assert_same_outputs_and_gradients(ours, layer, out, expected, x)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("bias", [True, False])
def test_to_torch_gives_the_same_layer(norm_first, bias):
    torch.manual_seed(1)
    config = tc.BlockConfig(D, H, d_mlp=20, norm_first=norm_first, bias=bias)
    ours = tc.Block(config).double()
    layer = torch_layers.to_torch(ours)
    assert layer.norm_first is norm_first
    x = torch.randn(B, N, D, dtype=F64, requires_grad=True)
    out, expected = ours(x, is_causal=True), layer(x, src_mask=masks("causal")[2])
    torch.testing.assert_close(out, expected)
    back = torch_layers.from_torch(layer)
    assert back.config == config
    torch.testing.assert_close(back(x, is_causal=True), out)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_a_stack_of_blocks_equals_torch_transformer_encoder(norm_first):
    M = 3  # Turner: the block is repeated M times
    encoder = nn.TransformerEncoder(
        torch_layer(norm_first), num_layers=M, enable_nested_tensor=False
    )
    with torch.no_grad():  # the M clones start equal: make them differ
        for p in encoder.parameters():
            p.add_(0.1 * torch.randn_like(p))
    blocks = nn.ModuleList(torch_layers.from_torch(layer) for layer in encoder.layers)
    x = torch.randn(B, N, D, dtype=F64, requires_grad=True)
    out = x
    for block in blocks:
        out = block(out, is_causal=True)
    expected = encoder(x, mask=masks("causal")[2])
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    torch.testing.assert_close(
        torch.autograd.grad(out, x, upstream)[0],
        torch.autograd.grad(expected, x, upstream)[0],
    )


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_attention_weights_are_those_of_the_attention_branch(norm, norm_first):
    torch.manual_seed(0)
    block = tc.Block(tc.BlockConfig(D, H, norm=norm, norm_first=norm_first)).double()
    assert isinstance(block.norm_1, {"layer": tc.LayerNorm, "rms": tc.RMSNorm}[norm])
    x = torch.randn(B, N, D, dtype=F64)
    weights = block.attention_weights(x, is_causal=True)
    h = block.norm_1(x) if norm_first else x  # what attention sees
    _, expected = block.attn(h, is_causal=True, need_weights=True)
    torch.testing.assert_close(weights, expected)
    assert weights.shape == (B, H, N, N)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, N, dtype=F64))
    assert not weights.triu(diagonal=1).any()  # causal: no weight on later keys


def zero_branches(block):
    with torch.no_grad():
        for linear in (block.attn.out_proj, block.mlp.down_proj):
            linear.weight.zero_()
            linear.bias.zero_()


def test_a_pre_norm_block_with_silent_branches_is_the_identity():
    torch.manual_seed(0)
    block = tc.Block(tc.BlockConfig(D, H)).double()
    zero_branches(block)
    x = torch.randn(B, N, D, dtype=F64)
    torch.testing.assert_close(block(x), x)  # the residual path carries x through


def test_a_post_norm_block_with_silent_branches_normalises():
    torch.manual_seed(0)
    block = tc.Block(tc.BlockConfig(D, H, norm_first=False)).double()
    zero_branches(block)
    x = torch.randn(B, N, D, dtype=F64)
    torch.testing.assert_close(block(x), tc.layer_norm(tc.layer_norm(x)))


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_mlp_applies_the_same_weights_to_each_token(activation):
    torch.manual_seed(0)
    mlp = tc.MLP(D, activation=activation).double()
    assert mlp.up_proj.weight.shape == (4 * D, D)  # d_mlp = 4·D by default
    x = torch.randn(B, N, D, dtype=F64)
    one_at_a_time = torch.stack(
        [torch.stack([mlp(x[b, n]) for n in range(N)]) for b in range(B)]
    )
    torch.testing.assert_close(mlp(x), one_at_a_time)
    act = {"gelu": nn.functional.gelu, "relu": torch.relu}[activation]
    written_out = act(x @ mlp.up_proj.weight.T + mlp.up_proj.bias)
    written_out = written_out @ mlp.down_proj.weight.T + mlp.down_proj.bias
    torch.testing.assert_close(mlp(x), written_out)


def test_config_defaults_and_parameter_count():
    config = tc.BlockConfig(d_model=D, n_heads=H)
    assert config.d_mlp == 4 * D
    assert (config.norm, config.norm_first, config.activation) == (
        "layer",
        True,
        "gelu",
    )
    block = tc.Block(config)
    attention = 4 * D * D + 4 * D
    mlp = 2 * D * 4 * D + 4 * D + D
    norms = 2 * 2 * D
    assert sum(p.numel() for p in block.parameters()) == attention + mlp + norms


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_heads": 5}, "d_model must be divisible by n_heads"),
        (
            {"norm": "batch"},
            r"norm: expected one of \['layer', 'none', 'rms'\], got 'batch'",
        ),
        ({"residual": 1}, "residual: expected True or False, got 1"),
        ({"activation": "tanh"}, r"activation: expected one of \['gelu', 'relu'\]"),
        ({"dropout": 1.5}, r"dropout: expected a probability in \[0, 1\]"),
        ({"d_mlp": 0}, "d_mlp: expected a positive int"),
    ],
)
def test_bad_config_values_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        tc.BlockConfig(**{"d_model": D, "n_heads": H, **changes})


def test_a_wrong_width_names_expected_and_given_shapes():
    block = tc.Block(tc.BlockConfig(D, H))
    with pytest.raises(
        tc.ShapeError,
        match=r"x: expected shape \(B, N, D\) with D=16, got \(2, 5, 12\)",
    ):
        block(torch.randn(2, 5, 12))


def test_to_torch_refuses_rms_norm():
    with pytest.raises(ValueError, match="LayerNorm only"):
        torch_layers.to_torch(tc.Block(tc.BlockConfig(D, H, norm="rms")))


@pytest.mark.parametrize("name", blk.__all__)
def test_every_public_object_names_its_chapter(name):
    assert "Chapter" in getattr(blk, name).__doc__


# --- rotary positions (chapter 5): a choice of the config -----------------


def rotary_attention_by_hand(attn, h, offset, is_causal):
    """Split heads, turn q and k by position, torch's kernel, merge, out-proj."""
    d = D // H
    q, k, v = nn.functional.linear(h, attn.qkv_proj.weight, attn.qkv_proj.bias).chunk(
        3, -1
    )
    q, k, v = (t.view(B, N, H, d).transpose(1, 2) for t in (q, k, v))  # (B, H, N, d)
    angles = tc.position_angles(N, d, offset=offset)
    q, k = tc.apply_rotary_complex(q, angles), tc.apply_rotary_complex(k, angles)
    heads = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    return attn.out_proj(heads.transpose(1, 2).reshape(B, N, D))  # (B, N, D)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("offset", [0, 3])
def test_a_rotary_block_equals_a_manual_computation(norm_first, offset):
    torch.manual_seed(2)
    config = tc.BlockConfig(D, H, norm_first=norm_first, rotary=True, max_len=16)
    block = tc.Block(config).double()
    assert isinstance(block.attn.rotary, tc.RotaryEmbedding)
    assert (block.attn.rotary.head_dim, block.attn.rotary.max_len) == (D // H, 16)
    x = torch.randn(B, N, D, dtype=F64, requires_grad=True)
    out = block(x, is_causal=True, offset=offset)
    if norm_first:
        h = x + rotary_attention_by_hand(block.attn, block.norm_1(x), offset, True)
        expected = h + block.mlp(block.norm_2(h))
    else:
        h = block.norm_1(x + rotary_attention_by_hand(block.attn, x, offset, True))
        expected = block.norm_2(h + block.mlp(h))
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    params = [x, block.attn.qkv_proj.weight, block.norm_1.weight]
    for got, want in zip(
        torch.autograd.grad(out, params, upstream),
        torch.autograd.grad(expected, params, upstream),
        strict=True,
    ):
        torch.testing.assert_close(got, want)
    weights = block.attention_weights(x, is_causal=True, offset=offset)
    h = block.norm_1(x) if norm_first else x
    torch.testing.assert_close(
        weights, block.attn(h, is_causal=True, need_weights=True, offset=offset)[1]
    )


def test_rotary_adds_no_parameters_and_is_off_by_default():
    plain, rotary = (
        tc.Block(tc.BlockConfig(D, H)),
        tc.Block(tc.BlockConfig(D, H, rotary=True)),
    )
    assert plain.attn.rotary is None
    assert list(plain.state_dict()) == list(rotary.state_dict())
    rotary.load_state_dict(plain.state_dict())
    x = torch.randn(B, N, D)
    assert not torch.allclose(rotary(x), plain(x))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: tc.BlockConfig(12, 4, rotary=True),
            r"rotary: expected an even head width d = d_model / n_heads \(features "
            r"are rotated in pairs\), got d = 12 / 4 = 3",
        ),
        (
            lambda: tc.BlockConfig(D, H, rotary=True, max_len=0),
            r"max_len: expected a positive int, got 0",
        ),
        (
            lambda: tc.BlockConfig(D, H, rotary="yes"),
            r"rotary: expected True or False, got 'yes'",
        ),
        (
            lambda: tc.Block(tc.BlockConfig(D, H, rotary=True, max_len=8))(
                torch.zeros(1, 6, D), offset=4
            ),
            r"offset \+ N = 4 \+ 6 = 10 exceeds max_len = 8",
        ),
        (
            lambda: torch_layers.to_torch(tc.Block(tc.BlockConfig(D, H, rotary=True))),
            r"to_torch: torch's layer has no rotary positions, got rotary=True",
        ),
    ],
)
def test_bad_rotary_settings_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- chapter 4's experiments and counts: no norm, no residuals, stacks ------


def test_norm_none_leaves_the_branches_unnormalised():
    block = tc.Block(tc.BlockConfig(D, H, norm="none")).double()
    x = torch.randn(B, N, D, dtype=F64)
    y = x + block.attn(x)  # pre-norm without norms: plain residual sums
    torch.testing.assert_close(block(x), y + block.mlp(y))
    assert blk.parameter_count(block.config)["norms"] == 0
    assert (
        sum(p.numel() for p in block.parameters())
        == (blk.parameter_count(block.config)["total"])
    )


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_a_block_without_residuals_replaces_its_input(norm_first):
    config = tc.BlockConfig(D, H, norm_first=norm_first, residual=False)
    block = tc.Block(config).double()
    x = torch.randn(B, N, D, dtype=F64)
    mask = masks("boolean")[0]
    if norm_first:
        y = block.attn(block.norm_1(x), mask=mask)
        expected = block.mlp(block.norm_2(y))
    else:
        y = block.norm_1(block.attn(x, mask=mask))
        expected = block.norm_2(block.mlp(y))
    torch.testing.assert_close(block(x, mask=mask), expected)
    with_residuals = tc.Block(tc.BlockConfig(D, H, norm_first=norm_first)).double()
    with_residuals.load_state_dict(block.state_dict())  # the same weights
    assert not torch.allclose(with_residuals(x, mask=mask), expected)
    with pytest.raises(ValueError, match="residual=False"):
        torch_layers.to_torch(block)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_a_block_stack_equals_torch_transformer_encoder_with_its_final_norm(
    norm_first,
):
    M = 3
    final = nn.LayerNorm(D, dtype=F64) if norm_first else None
    encoder = nn.TransformerEncoder(
        torch_layer(norm_first), num_layers=M, norm=final, enable_nested_tensor=False
    )
    with torch.no_grad():
        for p in encoder.parameters():
            p.add_(0.1 * torch.randn_like(p))
    stack = tc.BlockStack(torch_layers.from_torch(encoder.layers[0]).config, M).double()
    for ours, theirs in zip(stack.blocks, encoder.layers, strict=True):
        ours.load_state_dict(torch_layers.from_torch(theirs).state_dict())
    if norm_first:
        stack.final_norm.load_state_dict(final.state_dict())
    else:
        assert isinstance(stack.final_norm, nn.Identity)
    x = torch.randn(B, N, D, dtype=F64, requires_grad=True)
    keep, _, _, padding = masks("padding")
    out = stack(x, mask=keep)
    expected = encoder(x, src_key_padding_mask=padding)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    torch.testing.assert_close(
        torch.autograd.grad(out, x, upstream)[0],
        torch.autograd.grad(expected, x, upstream)[0],
    )


def test_the_residual_stream_is_every_block_output_before_the_final_norm():
    stack = tc.BlockStack(tc.BlockConfig(D, H), 4).double()
    x = torch.randn(B, N, D, dtype=F64)
    stream = stack.residual_stream(x, is_causal=True)
    assert len(stream) == 5
    assert stream[0] is x
    for m, block in enumerate(stack.blocks, start=1):
        torch.testing.assert_close(stream[m], block(stream[m - 1], is_causal=True))
    torch.testing.assert_close(stack(x, is_causal=True), stack.final_norm(stream[-1]))
    with pytest.raises(ValueError, match="n_blocks: expected a positive int"):
        tc.BlockStack(tc.BlockConfig(D, H), 0)


@pytest.mark.parametrize(
    "changes",
    [{}, {"bias": False}, {"norm": "rms"}, {"norm": "none"}, {"d_mlp": 40}],
    ids=["default", "no-bias", "rms", "no-norm", "d_mlp=40"],
)
def test_parameter_count_matches_the_module(changes):
    config = tc.BlockConfig(**{"d_model": D, "n_heads": H, **changes})
    block = tc.Block(config)
    counts = blk.parameter_count(config)
    assert counts["attention"] == sum(p.numel() for p in block.attn.parameters())
    assert counts["mlp"] == sum(p.numel() for p in block.mlp.parameters())
    assert counts["total"] == sum(p.numel() for p in block.parameters())
    if not changes:
        assert counts["total"] == 12 * D * D + 13 * D


@pytest.mark.parametrize("n_tokens", [1, 7, 32, 64])
def test_flop_count_matches_torch_flop_counter(n_tokens):
    from torch.utils.flop_counter import FlopCounterMode

    config = tc.BlockConfig(d_model=16, n_heads=4, d_mlp=40)
    block = tc.Block(config)
    x = torch.randn(1, n_tokens, 16)
    counted = {}
    for name, run in [
        ("attention", lambda: block.attn(x, need_weights=True)),  # explicit path
        ("mlp", lambda: block.mlp(x)),
    ]:
        with FlopCounterMode(display=False) as counter:
            run()
        counted[name] = counter.get_total_flops()
    assert counted == blk.flop_count(config, n_tokens)


def test_flop_shares_are_equal_at_twice_the_width():
    config = tc.BlockConfig(d_model=64, n_heads=4)
    at = {n: blk.flop_count(config, n) for n in (127, 128, 129)}
    assert at[128]["mlp"] == at[128]["attention"]  # N = 2D, eq. (4.2)
    assert at[127]["mlp"] > at[127]["attention"]
    assert at[129]["mlp"] < at[129]["attention"]


def test_torch_layers_refuse_what_they_cannot_convert():
    with pytest.raises(
        TypeError, match="expected a MultiHeadAttention or a Block, got"
    ):
        torch_layers.to_torch(nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"expected an nn\.MultiheadAttention or an"):
        torch_layers.from_torch(nn.Linear(2, 2))
