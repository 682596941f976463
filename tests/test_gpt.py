"""transformer_course.gpt (chapter 6): the GPT, sampling and generation.

The model is checked against torch's own encoder stack in float64 (values and
gradients), the incremental property is checked through the whole model, and
cached generation must give exactly the tokens of uncached generation.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_course as tc
from transformer_course import block as blk
from transformer_course import torch_layers, train
from transformer_course.gpt import sample_next

F64 = torch.float64
V, BLOCK, M, D, H = 11, 8, 2, 8, 2
POSITIONS = ["learned", "sinusoidal", "rope", "none"]


def tiny(positions="learned", seed=0, **changes):
    """A float64 GPT with weights large enough that its logits are far from flat."""
    config = tc.GPTConfig(
        vocab_size=V,
        block_size=BLOCK,
        n_layers=M,
        n_heads=H,
        d_model=D,
        d_mlp=12,
        positions=positions,
        **changes,
    )
    torch.manual_seed(seed)
    model = tc.GPT(config).double().eval()
    with torch.no_grad():  # GPT-2's 0.02 gives near-uniform logits: spread them
        for p in model.parameters():
            p.add_(0.4 * torch.randn_like(p))
    return model


def token_ids(batch=2, n=BLOCK, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(V, (batch, n), generator=g)


def seeded(seed=0):
    return torch.Generator().manual_seed(seed)


# --- parity with torch's own modules ------------------------------------------


def torch_reference(gpt):
    """nn.TransformerEncoder (pre-norm, GELU, final LayerNorm) with the GPT's weights."""
    c = gpt.config
    layers = [torch_layers.to_torch(b) for b in gpt.blocks.blocks]
    encoder = nn.TransformerEncoder(
        layers[0],
        num_layers=c.n_layers,
        norm=nn.LayerNorm(c.d_model, bias=c.bias, dtype=F64),
        enable_nested_tensor=False,
    )
    for mine, theirs in zip(encoder.layers, layers, strict=True):
        mine.load_state_dict(theirs.state_dict())
    encoder.norm.load_state_dict(gpt.blocks.final_norm.state_dict())
    embedding = nn.Parameter(gpt.token_embedding.weight.detach().clone())
    table = (
        nn.Parameter(gpt.positions.weight.detach().clone())
        if c.positions == "learned"
        else None
    )

    def forward(ids):
        n = ids.shape[1]
        x = embedding[ids]  # (B, N, D)
        if c.positions == "learned":
            x = x + table[:n]
        elif c.positions == "sinusoidal":
            x = x + tc.sinusoidal_positions(n, c.d_model, dtype=F64)
        causal = nn.Transformer.generate_square_subsequent_mask(n, dtype=F64)
        h = encoder(x, mask=causal, is_causal=True)  # (B, N, D), final norm
        return F.linear(h, embedding)  # tied head: (B, N, V)

    return forward, encoder, embedding, table


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("n", [1, 5, BLOCK])
def test_gpt_equals_torch_encoder_stack_values_and_gradients(positions, bias, n):
    gpt = tiny(positions, bias=bias)
    reference, encoder, embedding, table = torch_reference(gpt)
    ids = token_ids(n=n)
    out, expected = gpt(ids), reference(ids)
    assert out.shape == (2, n, V)
    torch.testing.assert_close(out, expected)

    last, first = gpt.blocks.blocks[-1], gpt.blocks.blocks[0]
    pairs = [
        (gpt.token_embedding.weight, embedding),  # embedding and head, tied
        (first.attn.qkv_proj.weight, encoder.layers[0].self_attn.in_proj_weight),
        (last.attn.out_proj.weight, encoder.layers[-1].self_attn.out_proj.weight),
        (first.mlp.up_proj.weight, encoder.layers[0].linear1.weight),
        (last.mlp.down_proj.weight, encoder.layers[-1].linear2.weight),
        (first.norm_1.weight, encoder.layers[0].norm1.weight),
        (last.norm_2.weight, encoder.layers[-1].norm2.weight),
        (gpt.blocks.final_norm.weight, encoder.norm.weight),
    ]
    if bias:
        pairs += [
            (last.attn.qkv_proj.bias, encoder.layers[-1].self_attn.in_proj_bias),
            (first.mlp.down_proj.bias, encoder.layers[0].linear2.bias),
            (gpt.blocks.final_norm.bias, encoder.norm.bias),
        ]
    if positions == "learned":
        pairs.append((gpt.positions.weight, table))
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, [a for a, _ in pairs], upstream)
    want = torch.autograd.grad(expected, [b for _, b in pairs], upstream)
    for g, w in zip(got, want, strict=True):
        assert g.abs().sum() > 0  # every compared gradient is used
        torch.testing.assert_close(g, w)


# --- the incremental property -------------------------------------------------


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize(("n", "k"), [(1, 1), (1, 7), (3, 2), (5, 3), (7, 1)])
def test_logits_of_a_prefix_are_the_first_rows_of_the_longer_logits(positions, n, k):
    gpt, ids = tiny(positions), token_ids(n=n + k)
    longer = gpt(ids)  # (B, n + k, V)
    torch.testing.assert_close(gpt(ids[:, :n]), longer[:, :n])
    # and the appended tokens do change their own rows
    changed = ids.clone()
    changed[:, n:] = (changed[:, n:] + 1) % V
    torch.testing.assert_close(gpt(changed)[:, :n], longer[:, :n])


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize(
    "chunks", [[1] * BLOCK, [BLOCK], [3, 5], [5, 1, 2], [1, 4, 3]], ids=str
)
def test_feeding_chunks_through_a_cache_equals_one_full_pass(positions, chunks):
    gpt, ids = tiny(positions), token_ids()
    full = gpt(ids)  # (B, BLOCK, V)
    cache = gpt.new_cache(batch_size=2)
    assert cache.max_len == BLOCK
    assert cache.layers[0].keys.dtype == F64
    start = 0
    for piece in torch.split(ids, chunks, dim=1):
        n = piece.shape[1]
        torch.testing.assert_close(gpt(piece, cache=cache), full[:, start : start + n])
        start += n
        assert cache.length == start


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_cache_matches_a_full_pass_with_rms_norm_and_untied_head(norm):
    gpt, ids = tiny("rope", norm=norm, tie_weights=False), token_ids()
    full = gpt(ids)
    cache = gpt.new_cache(batch_size=2)
    rows = [gpt(ids[:, n : n + 1], cache=cache) for n in range(BLOCK)]
    torch.testing.assert_close(torch.cat(rows, dim=1), full)


def test_the_cache_cannot_take_the_model_past_its_context():
    gpt = tiny("rope")
    cache = gpt.new_cache(batch_size=2)
    gpt(token_ids(n=6), cache=cache)
    message = r"positions 6\.\.9 go past the context of block_size = 8 tokens"
    with pytest.raises(tc.ShapeError, match=message):
        gpt(token_ids(n=4), cache=cache)
    assert cache.length == 6


# --- generation ---------------------------------------------------------------


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("prompt", [1, 3, BLOCK, BLOCK + 3])
@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 0.8, "top_k": 4}],
    ids=["greedy", "sampled", "top-k"],
)
def test_cached_and_uncached_generation_give_the_same_tokens(
    positions, prompt, sampling
):
    gpt, ids = tiny(positions), token_ids(batch=3, n=prompt)
    new = 2 * BLOCK  # the window slides whatever the prompt
    cached = tc.generate(gpt, ids, new, generator=seeded(5), **sampling)
    uncached = tc.generate(
        gpt, ids, new, use_cache=False, generator=seeded(5), **sampling
    )
    assert cached.shape == (3, prompt + new)
    assert cached.dtype == ids.dtype
    torch.testing.assert_close(cached[:, :prompt], ids)  # the prompt is kept
    torch.testing.assert_close(cached, uncached, rtol=0, atol=0)
    assert len(cached[:, prompt:].unique()) > 1  # not a degenerate model


def test_uncached_greedy_generation_is_argmax_of_the_window_step_by_step():
    gpt, ids = tiny("learned"), token_ids(batch=2, n=3)
    out = tc.generate(gpt, ids, 9, temperature=0.0)
    for t in range(3, 12):
        window = out[:, max(0, t - BLOCK) : t]
        torch.testing.assert_close(out[:, t], gpt(window)[:, -1].argmax(-1))


def test_cached_generation_feeds_one_token_per_step_until_the_window_slides():
    gpt, lengths = tiny("rope"), []
    forward = gpt.forward

    def recording(ids, cache=None):
        lengths.append((ids.shape[1], cache is not None))
        return forward(ids, cache=cache)

    gpt.forward = recording
    tc.generate(gpt, token_ids(n=3), 7, temperature=0.0)
    # 3 + 5 = 8 fit: one prefill, then one token at a time; then the window slides
    assert lengths == [(3, True)] + [(1, True)] * 5 + [(BLOCK, True)] * 1
    lengths.clear()
    tc.generate(gpt, token_ids(n=3), 3, temperature=0.0, use_cache=False)
    assert lengths == [(3, False), (4, False), (5, False)]


def test_generate_restores_the_training_mode_and_builds_no_graph():
    gpt = tiny("learned", dropout=0.5)
    gpt.train()
    out = tc.generate(gpt, token_ids(n=2), 4, generator=seeded())
    assert gpt.training
    assert all(m.training for m in gpt.modules())
    assert not out.requires_grad
    gpt.eval()
    tc.generate(gpt, token_ids(n=2), 4, generator=seeded())
    assert not any(m.training for m in gpt.modules())


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_model_with_dropout_generates_as_in_eval_mode(use_cache):
    gpt, ids = tiny("learned", dropout=0.5), token_ids(n=2)
    gpt.train()
    runs = [
        tc.generate(gpt, ids, 10, use_cache=use_cache, generator=seeded(3))
        for _ in range(2)
    ]
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)
    gpt.eval()
    evaluated = tc.generate(gpt, ids, 10, use_cache=use_cache, generator=seeded(3))
    torch.testing.assert_close(runs[0], evaluated, rtol=0, atol=0)
    gpt.train()  # dropout is really on in training: two passes differ
    assert not torch.allclose(gpt(ids), gpt(ids))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_generate_keeps_the_dtype_of_the_prompt(dtype):
    ids = token_ids(n=3).to(dtype)
    for use_cache in (True, False):
        out = tc.generate(tiny(), ids, 4, use_cache=use_cache, generator=seeded())
        assert out.dtype == dtype


def test_generate_rejects_an_empty_prompt_and_a_negative_count():
    gpt = tiny()
    with pytest.raises(tc.ShapeError, match=r"at least one token .* got N = 0"):
        tc.generate(gpt, torch.zeros(2, 0, dtype=torch.long), 3)
    with pytest.raises(
        ValueError, match=r"max_new_tokens: expected an int ≥ 0, got -1"
    ):
        tc.generate(gpt, token_ids(n=2), -1)
    torch.testing.assert_close(tc.generate(gpt, token_ids(n=2), 0), token_ids(n=2))


# --- sampling -----------------------------------------------------------------


def logits(batch=4, vocab=20, seed=0):
    return torch.randn(batch, vocab, dtype=F64, generator=seeded(seed))


def test_temperature_zero_and_top_1_are_the_argmax():
    scores = logits()
    assert sample_next(scores, temperature=0.0).tolist() == scores.argmax(-1).tolist()
    for seed in range(5):
        picked = sample_next(scores, top_k=1, generator=seeded(seed))
        assert picked.tolist() == scores.argmax(-1).tolist()
    assert sample_next(scores, temperature=0.0).shape == (4,)


@pytest.mark.parametrize("k", [2, 5])
def test_top_k_samples_only_the_k_most_likely_and_all_of_them(k):
    scores = logits(batch=3).repeat(1000, 1)  # each of 3 rows, 1000 times
    picked = sample_next(scores, temperature=3.0, top_k=k, generator=seeded())
    top = scores.topk(k, dim=-1).indices  # (B, k)
    assert (picked[:, None] == top).any(dim=-1).all()  # never outside the top k
    for row in range(3):
        assert set(picked[row::3].tolist()) == set(top[row].tolist())


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.5, None), (2.0, 3)])
def test_sample_frequencies_follow_the_tempered_softmax(temperature, top_k):
    scores = torch.tensor([[1.0, 0.5, 0.0, -0.5, -2.0]], dtype=F64)
    draws = 40_000
    picked = sample_next(
        scores.expand(draws, -1), temperature, top_k, generator=seeded(1)
    )
    frequency = torch.bincount(picked, minlength=5).double() / draws
    kept = scores / temperature
    if top_k is not None:
        kept[:, top_k:] = -math.inf  # the scores are sorted
    expected = F.softmax(kept, dim=-1)[0]
    torch.testing.assert_close(frequency, expected, rtol=0, atol=0.015)


def test_sampling_is_determined_by_the_generator():
    scores = torch.zeros(50, 20, dtype=F64)  # uniform: any token can come
    first = sample_next(scores, generator=seeded(7))
    assert torch.equal(first, sample_next(scores, generator=seeded(7)))
    assert not torch.equal(first, sample_next(scores, generator=seeded(8)))
    assert first.dtype == torch.long


@pytest.mark.parametrize("temperature", [-0.5, math.nan])
def test_sample_next_rejects_a_bad_temperature(temperature):
    with pytest.raises(ValueError, match=r"temperature: expected a float ≥ 0, got"):
        sample_next(logits(), temperature)


@pytest.mark.parametrize("top_k", [0, -1, 2.5, True])
def test_sample_next_rejects_a_bad_top_k(top_k):
    with pytest.raises(ValueError, match=r"top_k: expected a positive int, got"):
        sample_next(logits(), top_k=top_k)


def test_sample_next_wants_logits_of_shape_b_v():
    with pytest.raises(tc.ShapeError, match=r"^logits: expected shape"):
        sample_next(torch.zeros(2, 3, 5))


# --- the model itself ---------------------------------------------------------


def test_the_head_is_the_token_embedding_unless_untied():
    tied = tiny()
    assert tied.head.weight is tied.token_embedding.weight
    names = [name for name, _ in tied.named_parameters()]
    assert "head.weight" not in names  # listed once, as the embedding
    untied = tiny(tie_weights=False)
    assert untied.head.weight is not untied.token_embedding.weight
    assert untied.head.weight.shape == untied.token_embedding.weight.shape == (V, D)
    assert "head.weight" in [name for name, _ in untied.named_parameters()]
    assert untied.head.bias is None


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("tie_weights", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count_counts_each_parameter_once(positions, tie_weights, bias):
    gpt = tiny(positions, tie_weights=tie_weights, bias=bias)
    counts = gpt.parameter_count()
    unique = {id(p): p for p in gpt.parameters()}
    assert counts["total"] == sum(p.numel() for p in unique.values())
    parts = sum(value for name, value in counts.items() if name != "total")
    assert counts["total"] == parts
    assert counts["token embedding"] == V * D
    assert counts["positions"] == (BLOCK * D if positions == "learned" else 0)
    assert counts["head"] == (0 if tie_weights else V * D)
    block_config = gpt.config.block_config()
    assert counts["blocks"] == M * blk.parameter_count(block_config)["total"]
    assert counts["final norm"] == (2 * D if bias else D)


def test_initialisation_follows_gpt2():
    layers = 4
    config = tc.GPTConfig(
        vocab_size=256, block_size=64, n_layers=layers, n_heads=4, d_model=64
    )
    torch.manual_seed(0)
    gpt = tc.GPT(config)
    residual = 0.02 / math.sqrt(2 * layers)

    def assert_std(tensor, expected, what):
        std = tensor.detach().std().item()
        assert abs(std - expected) < 0.1 * expected, (
            f"{what}: expected std ≈ {expected:.4f}, got {std:.4f}"
        )
        assert abs(tensor.detach().mean().item()) < 0.2 * expected, what

    assert_std(gpt.token_embedding.weight, 0.02, "token embedding")
    assert_std(gpt.positions.weight, 0.02, "positions")
    for m, block in enumerate(gpt.blocks.blocks):
        assert_std(block.attn.qkv_proj.weight, 0.02, f"block {m} qkv_proj")
        assert_std(block.mlp.up_proj.weight, 0.02, f"block {m} up_proj")
        assert_std(block.attn.out_proj.weight, residual, f"block {m} out_proj")
        assert_std(block.mlp.down_proj.weight, residual, f"block {m} down_proj")
        for linear in (block.attn.qkv_proj, block.attn.out_proj, block.mlp.up_proj):
            assert torch.all(linear.bias == 0)
        assert torch.all(block.norm_1.weight == 1)
        assert torch.all(block.norm_2.bias == 0)
    assert torch.all(gpt.blocks.final_norm.weight == 1)
    # small weights: the first loss is close to that of a uniform guess, ln V
    ids = torch.randint(256, (4, 64), generator=seeded())
    loss = train.cross_entropy_loss(gpt, (ids[:, :-1], ids[:, 1:]))
    assert abs(loss.item() - math.log(256)) < 0.1


def test_ids_must_be_integers():
    gpt = tiny()
    with pytest.raises(TypeError, match=r"expected integer token ids, got dtype"):
        gpt(token_ids().double())
    with pytest.raises(TypeError, match=r"got dtype torch.bool"):
        gpt(token_ids() > 3)
    with pytest.raises(tc.ShapeError, match=r"^ids: expected shape \(B, N\)"):
        gpt(token_ids()[0])
    assert gpt(token_ids().int()).shape == (2, BLOCK, V)


@pytest.mark.parametrize(("bad", "low", "high"), [(V, 0, V), (-1, -1, V - 1)])
def test_ids_out_of_the_vocabulary_name_the_range(bad, low, high):
    ids = token_ids()
    ids[0, 0], ids[1, 1] = low, high
    message = (
        rf"ids: expected token ids in 0\.\.{V - 1}, got values from {low} to {high}"
    )
    with pytest.raises(ValueError, match=message):
        tiny()(ids)


def test_a_sequence_longer_than_the_context_names_block_size():
    with pytest.raises(
        tc.ShapeError, match=r"positions 0\.\.8 go past .*block_size = 8"
    ):
        tiny()(token_ids(n=BLOCK + 1))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": 0}, r"vocab_size: expected a positive int, got 0"),
        ({"block_size": 2.0}, r"block_size: expected a positive int, got 2\.0"),
        ({"n_layers": True}, r"n_layers: expected a positive int, got True"),
        ({"positions": "alibi"}, r"positions: expected one of \[.*\], got 'alibi'"),
        ({"d_model": 10, "n_heads": 4}, r"d_model=10, n_heads=4"),
        ({"dropout": 1.5}, r"dropout: expected a probability"),
        ({"norm": "batch"}, r"norm: expected one of \['layer', 'rms'\], got 'batch'"),
        ({"norm": "none"}, r"norm: expected one of \['layer', 'rms'\], got 'none'"),
        ({"d_mlp": 0}, r"d_mlp: expected a positive int, got 0"),
        (
            {"positions": "rope", "d_model": 6, "n_heads": 2},
            r"rotary: expected an even head width",
        ),
    ],
)
def test_bad_config_values_are_named(changes, message):
    settings = {"vocab_size": V, "block_size": BLOCK, "d_model": D, "n_heads": H}
    with pytest.raises(ValueError, match=message):
        tc.GPTConfig(**{**settings, **changes})


# --- training -----------------------------------------------------------------


def test_a_few_steps_of_fit_learn_a_repeated_text():
    text = "to be or not to be, that is the question. " * 30
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text])
    get_batch = tc.window_batches(tc.split_ids(ids, 0.2), batch_size=16, block_size=16)
    config = tc.GPTConfig(
        vocab_size=len(vocab), block_size=16, n_layers=2, n_heads=2, d_model=32
    )
    torch.manual_seed(0)
    gpt = tc.GPT(config)
    inputs, targets = get_batch("train", 0)
    assert inputs.shape == targets.shape == (16, 16)
    before = train.cross_entropy_loss(gpt, (inputs, targets)).item()
    assert abs(before - math.log(len(vocab))) < 0.2  # a uniform guess at first
    history = tc.fit(
        gpt,
        get_batch,
        train.cross_entropy_loss,
        tc.TrainConfig(
            steps=60,
            lr=1e-2,
            warmup_steps=5,
            eval_every=60,
            eval_batches=2,
            device="cpu",
        ),
        progress=False,
    )
    assert history.train_losses[0] == pytest.approx(before, abs=0.05)
    assert history.val_losses[-1] < 0.5 * before, (
        f"expected the validation loss to halve from {before:.2f}, "
        f"got {history.val_losses[-1]:.2f}"
    )


# --- the cross-entropy of a whole text ---------------------------------------------


def brute_force_cross_entropy(model, ids):
    """−ln p(ids[n] | up to block_size tokens before it), one forward pass per target."""
    nll = [
        -F.log_softmax(model(ids[None, max(0, n - BLOCK) : n])[0, -1], dim=-1)[ids[n]]
        for n in range(1, len(ids))
    ]
    return torch.stack(nll).mean().item()


@pytest.mark.parametrize("T", [2, 5, BLOCK + 1, BLOCK + 2, 3 * BLOCK + 5])
@pytest.mark.parametrize("batch_size", [1, 64])
def test_sequence_cross_entropy_with_stride_1_scores_each_token_with_full_context(
    T, batch_size
):
    model = tiny("rope")
    ids = token_ids(1, T, seed=T)[0]
    got = tc.sequence_cross_entropy(model, ids, stride=1, batch_size=batch_size)
    assert got == pytest.approx(brute_force_cross_entropy(model, ids), rel=1e-12)


def test_sequence_cross_entropy_without_overlap_is_consecutive_windows():
    """stride = block_size: windows 0..8, 8..16, ... then one that ends at the
    last target and scores only the targets left."""
    model = tiny("learned")
    T = 4 * BLOCK + 3  # 34 targets: 4 whole windows, then 2 left over
    ids = token_ids(1, T, seed=2)[0]

    def nll(start, end):  # −ln p of targets start+1 .. end, from window start..end-1
        logits = model(ids[None, start:end])[0]  # (end − start, V)
        return F.cross_entropy(logits, ids[start + 1 : end + 1], reduction="none")

    windows = [nll(s, s + BLOCK) for s in range(0, 4 * BLOCK, BLOCK)]
    last = nll(T - 1 - BLOCK, T - 1)[-2:]  # targets 33 and 34 only
    want = torch.cat([*windows, last])
    assert want.shape == (T - 1,)
    got = tc.sequence_cross_entropy(model, ids, stride=BLOCK)
    assert got == pytest.approx(want.mean().item(), rel=1e-12)


@pytest.mark.parametrize(
    ("ids", "stride", "message"),
    [
        (
            torch.zeros(2, 5, dtype=torch.long),
            None,
            r"ids: expected shape \(T\), got \(2, 5\)",
        ),
        (torch.zeros(1, dtype=torch.long), None, "at least 2 tokens"),
        (torch.zeros(9, dtype=torch.long), 0, "stride: expected an int in 1..8"),
        (torch.zeros(9, dtype=torch.long), BLOCK + 1, "got 9"),
    ],
)
def test_sequence_cross_entropy_errors(ids, stride, message):
    with pytest.raises((ValueError, tc.ShapeError), match=message):
        tc.sequence_cross_entropy(tiny(), ids, stride=stride)
