"""transformer_course.kv_cache (chapter 6), and the cache threaded through attention.

A cached pass over chunks must equal one causal pass over the whole sequence,
row for row, in float64: in multi-head attention (both paths, with and without
rotary positions), in a block stack, and with a padding mask.
"""

import pytest
import torch

import transformer_course as tc
from transformer_course.kv_cache import KVCache, LayerCache
from transformer_course.multihead import split_heads

F64 = torch.float64
B, H, d = 2, 3, 4
D = H * d
CHUNKS = [[7], [1] * 7, [3, 1, 3], [4, 3], [1, 6]]  # ways to feed N = 7 tokens


def cache_for(max_len=8, **changes):
    sizes = {"batch_size": B, "n_heads": H, "max_len": max_len, "head_dim": d}
    return LayerCache(**{**sizes, **changes}, dtype=F64)


def keys(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, n, d, dtype=F64, generator=g)


def pieces(x, chunks):
    """x (B, N, ...) cut along N into consecutive chunks of the given lengths."""
    assert sum(chunks) == x.shape[1]
    return torch.split(x, chunks, dim=1)


# --- LayerCache and KVCache ---------------------------------------------------


def test_append_stores_after_the_prefix_and_returns_views_of_it():
    cache = cache_for(max_len=8)
    assert cache.keys.shape == cache.values.shape == (B, H, 8, d)
    assert cache.keys.dtype == F64
    assert cache.length == 0
    k1, v1, k2, v2 = keys(3, 0), keys(3, 1), keys(2, 2), keys(2, 3)

    k, v = cache.append(k1, v1)
    assert k.shape == v.shape == (B, H, 3, d)
    assert cache.length == 3
    torch.testing.assert_close(k, k1)
    torch.testing.assert_close(v, v1)

    k, v = cache.append(k2, v2)
    assert k.shape == v.shape == (B, H, 5, d)
    assert cache.length == 5
    torch.testing.assert_close(k, torch.cat([k1, k2], dim=2))
    torch.testing.assert_close(v, torch.cat([v1, v2], dim=2))
    # views of the preallocated tensors, not copies
    assert k._base is cache.keys
    assert v._base is cache.values
    assert k.data_ptr() == cache.keys.data_ptr()
    assert v.data_ptr() == cache.values.data_ptr()


def test_overflow_raises_naming_the_numbers_and_keeps_the_cache():
    cache = cache_for(max_len=8)
    cache.append(keys(6), keys(6, 1))
    message = r"6 tokens stored \+ 3 new = 9, more than its max_len = 8"
    with pytest.raises(ValueError, match=message):
        cache.append(keys(3), keys(3, 1))
    assert cache.length == 6  # nothing written
    k, _ = cache.append(keys(2, 5), keys(2, 6))  # exactly full is fine
    assert cache.length == 8
    assert k.shape == (B, H, 8, d)


def test_reset_forgets_the_tokens_and_the_next_append_starts_at_zero():
    cache = cache_for()
    cache.append(keys(5), keys(5, 1))
    storage = cache.keys
    cache.reset()
    assert cache.length == 0
    assert cache.keys is storage  # memory kept
    k, v = cache.append(keys(2, 7), keys(2, 8))
    assert k.shape == (B, H, 2, d)
    torch.testing.assert_close(k, keys(2, 7))
    torch.testing.assert_close(v, keys(2, 8))


@pytest.mark.parametrize(
    ("k_shape", "v_shape", "name"),
    [
        ((B, H + 1, 2, d), (B, H + 1, 2, d), "k"),  # wrong H
        ((B + 1, H, 2, d), (B + 1, H, 2, d), "k"),  # wrong B
        ((B, H, 2, d + 2), (B, H, 2, d + 2), "k"),  # wrong d
        ((B, H, 2, d), (B, H, 3, d), "v"),  # v's N differs from k's
        ((H, 2, d), (H, 2, d), "k"),  # no batch dimension
    ],
)
def test_append_rejects_mismatched_shapes_with_a_shape_error(k_shape, v_shape, name):
    cache = cache_for()
    with pytest.raises(tc.ShapeError, match=rf"^{name}: expected shape"):
        cache.append(torch.zeros(k_shape, dtype=F64), torch.zeros(v_shape, dtype=F64))
    assert cache.length == 0


@pytest.mark.parametrize("name", ["batch_size", "n_heads", "max_len", "head_dim"])
@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_layer_cache_rejects_bad_sizes_naming_them(name, bad):
    with pytest.raises(ValueError, match=rf"{name}: expected a positive int, got"):
        cache_for(**{name: bad})


def test_kv_cache_holds_one_layer_cache_per_block_and_resets_them_all():
    cache = KVCache(3, B, H, 8, d, dtype=F64)
    assert len(cache.layers) == 3
    assert all(isinstance(layer, LayerCache) for layer in cache.layers)
    assert len({id(layer.keys) for layer in cache.layers}) == 3  # not shared
    assert cache.max_len == 8
    for layer in cache.layers:
        layer.append(keys(4), keys(4, 1))
    assert cache.length == 4
    cache.reset()
    assert cache.length == 0
    assert all(layer.length == 0 for layer in cache.layers)
    with pytest.raises(ValueError, match=r"n_blocks: expected a positive int, got 0"):
        KVCache(0, B, H, 8, d)


# --- multi-head attention with a cache ----------------------------------------


def attention(rotary=False, seed=0):
    torch.manual_seed(seed)
    rope = tc.RotaryEmbedding(d) if rotary else None
    return tc.MultiHeadAttention(D, H, rotary=rope).double().eval()


def tokens(n=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, n, D, dtype=F64, generator=g)


@pytest.mark.parametrize("rotary", [False, True], ids=["no-positions", "rotary"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "teaching"])
@pytest.mark.parametrize("chunks", CHUNKS, ids=str)
def test_cached_chunks_equal_one_causal_pass_row_for_row(rotary, need_weights, chunks):
    mha, x = attention(rotary), tokens()
    full = mha(x, is_causal=True, need_weights=need_weights)
    cache = cache_for(max_len=x.shape[1])
    start = 0
    for piece in pieces(x, chunks):
        n = piece.shape[1]
        out = mha(piece, is_causal=True, need_weights=need_weights, cache=cache)
        assert cache.length == start + n
        if need_weights:
            (out, weights), (full_out, full_weights) = out, full
            # the new queries' weights over every stored key, L + n of them
            assert weights.shape == (B, H, n, start + n)
            torch.testing.assert_close(
                weights, full_weights[:, :, start : start + n, : start + n]
            )
            torch.testing.assert_close(
                weights.sum(-1), torch.ones(B, H, n, dtype=F64)
            )  # no weight lost on keys after the query (they are not there)
        else:
            full_out = full
        torch.testing.assert_close(out, full_out[:, start : start + n])
        start += n


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "teaching"])
def test_cached_chunks_with_a_padding_mask_equal_one_masked_pass(need_weights):
    mha, x = attention(rotary=True), tokens()
    keep = torch.ones(B, 7, dtype=torch.bool)
    keep[1, 5:] = False  # the second sequence is 5 real tokens, then padding
    full = mha(x, keep[:, None, None, :], is_causal=True, need_weights=need_weights)
    full = full[0] if need_weights else full
    cache, start = cache_for(max_len=7), 0
    for piece in pieces(x, [3, 1, 3]):
        n = piece.shape[1]
        mask = keep[:, None, None, : start + n]  # (B, 1, 1, L + n): the stored keys
        out = mha(piece, mask, is_causal=True, need_weights=need_weights, cache=cache)
        out = out[0] if need_weights else out
        torch.testing.assert_close(out, full[:, start : start + n])
        start += n


def test_rotary_positions_continue_from_the_cache_length():
    mha, x = attention(rotary=True), tokens()
    cache = cache_for(max_len=7)
    for piece in pieces(x, [4, 1, 2]):
        mha(piece, is_causal=True, cache=cache)
    # the keys of a single pass over all 7 tokens, turned at positions 0..6
    _, k, v = mha.qkv_proj(x).chunk(3, dim=-1)
    k, v = split_heads(k, H), split_heads(v, H)  # (B, H, 7, d)
    _, k_turned = mha.rotary(k, k, offset=0)
    torch.testing.assert_close(cache.keys[:, :, :7], k_turned)
    torch.testing.assert_close(cache.values[:, :, :7], v)  # values are not turned
    # the same keys turned from position 0 in each chunk would differ
    _, k_restarted = mha.rotary(k[:, :, 4:], k[:, :, 4:], offset=0)
    assert not torch.allclose(cache.keys[:, :, 4:7], k_restarted)


def test_attention_with_a_cache_and_an_offset_raises():
    mha, cache = attention(rotary=True), cache_for()
    mha(tokens(3), is_causal=True, cache=cache)
    message = r"positions continue from the 3 tokens it holds; expected offset=0, got 2"
    with pytest.raises(ValueError, match=message):
        mha(tokens(1), is_causal=True, offset=2, cache=cache)


def test_attention_with_a_cache_of_another_batch_size_raises_a_shape_error():
    mha = attention()
    with pytest.raises(tc.ShapeError, match=rf"^k: expected shape .*B={B + 1}"):
        mha(tokens(3), is_causal=True, cache=cache_for(batch_size=B + 1))


# --- blocks and stacks with a cache -------------------------------------------


def stack(n_blocks=3, norm="layer", rotary=False, seed=0):
    torch.manual_seed(seed)
    config = tc.BlockConfig(d_model=D, n_heads=H, d_mlp=20, norm=norm, rotary=rotary)
    model = tc.BlockStack(config, n_blocks).double().eval()
    with torch.no_grad():  # norms away from γ = 1, β = 0, so that they matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize(
    ("norm", "rotary"), [("layer", False), ("rms", True), ("layer", True)]
)
@pytest.mark.parametrize("chunks", CHUNKS, ids=str)
def test_block_stack_with_a_cache_equals_one_causal_pass(norm, rotary, chunks):
    model, x = stack(norm=norm, rotary=rotary), tokens()
    full = model(x, is_causal=True)
    cache = KVCache(3, B, H, 7, d, dtype=F64)
    start = 0
    for piece in pieces(x, chunks):
        n = piece.shape[1]
        out = model(piece, is_causal=True, cache=cache)
        assert [layer.length for layer in cache.layers] == [start + n] * 3
        torch.testing.assert_close(out, full[:, start : start + n])
        start += n


def test_a_single_block_with_a_layer_cache_equals_one_causal_pass():
    block, x = stack(n_blocks=1, rotary=True).blocks[0], tokens()
    full = block(x, is_causal=True)
    cache, start = cache_for(max_len=7), 0
    for piece in pieces(x, [2, 2, 3]):
        n = piece.shape[1]
        torch.testing.assert_close(
            block(piece, is_causal=True, cache=cache), full[:, start : start + n]
        )
        start += n


@pytest.mark.parametrize("n_layers", [2, 4])
def test_block_stack_rejects_a_cache_with_another_number_of_layers(n_layers):
    model = stack(n_blocks=3)
    cache = KVCache(n_layers, B, H, 7, d, dtype=F64)
    message = rf"cache: expected one layer per block, 3, got {n_layers}"
    with pytest.raises(ValueError, match=message):
        model(tokens(), is_causal=True, cache=cache)
    assert cache.length == 0
