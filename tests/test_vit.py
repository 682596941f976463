"""transformer_course.vit (chapter 7): patch embedding, the ViT, attention rollout."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_course as tc
from transformer_course import vit
from transformer_course.torch_layers import to_torch

F64 = torch.float64


def images(batch=3, channels=1, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, channels, size, size, dtype=F64, generator=g)


def tiny(seed=0, **changes):
    """A float64 ViT with weights large enough that its outputs are far from flat."""
    settings = {"n_layers": 2, "n_heads": 2, "d_model": 16, "d_mlp": 24, **changes}
    torch.manual_seed(seed)
    model = tc.ViT(tc.ViTConfig(**settings)).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


# --- the patch embedding is a strided convolution ----------------------------------


@pytest.mark.parametrize(
    ("size", "p", "C"), [(8, 1, 1), (8, 2, 1), (8, 4, 3), (12, 3, 2)]
)
def test_patch_embedding_equals_a_strided_conv2d_values_and_gradients(size, p, C):
    torch.manual_seed(0)
    embed = tc.PatchEmbedding(size, p, C, 6).double()
    conv = embed.as_conv2d()
    assert (conv.kernel_size, conv.stride) == ((p, p), (p, p))
    x = images(2, C, size).requires_grad_()
    ours = embed(x)  # (B, N, D)
    theirs = conv(x).flatten(2).transpose(1, 2)  # (B, D, H/p, W/p) -> (B, N, D)
    torch.testing.assert_close(ours, theirs)
    upstream = torch.randn_like(ours)
    got = torch.autograd.grad(ours, [x, embed.proj.weight, embed.proj.bias], upstream)
    want = torch.autograd.grad(theirs, [x, conv.weight, conv.bias], upstream)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1].reshape(got[1].shape))
    torch.testing.assert_close(got[2], want[2])


def test_patch_tokens_are_numbered_row_by_row():
    """Token n reads the patch at row n // (H/p), column n % (H/p)."""
    embed = tc.PatchEmbedding(8, 4, 1, 16).double()
    x = torch.zeros(1, 1, 8, 8, dtype=F64)
    x[0, 0, 4:, :4] = 1  # the bottom-left patch: row 1, column 0, token 2
    out = embed(x)[0]  # (4, D)
    bias_only = embed.proj.bias
    changed = [n for n in range(4) if not torch.allclose(out[n], bias_only)]
    assert changed == [2]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda e: e(torch.zeros(2, 1, 9, 9)), r"expected shape \(B, C, H, W\)"),
        (
            lambda e: e(torch.zeros(2, 3, 8, 8)),
            r"got \(2, 3, 8, 8\): C must be 1, it is 3",
        ),
        (lambda e: e(torch.zeros(2, 8, 8)), r"add the channel axis"),
        (lambda e: tc.PatchEmbedding(8, 3, 1, 4), "expected a divisor of image_size 8"),
        (
            lambda e: tc.PatchEmbedding(8, 0, 1, 4),
            "patch_size: expected a positive int",
        ),
    ],
    ids=["size", "channels", "no-channel-axis", "not-divisible", "zero-patch"],
)
def test_patch_embedding_errors_name_what_was_expected(make, message):
    embed = tc.PatchEmbedding(8, 2, 1, 4)
    with pytest.raises((ValueError, tc.ShapeError), match=message):
        make(embed)


def test_config_errors():
    with pytest.raises(
        ValueError, match="patch_size: expected a divisor of image_size 8, got 3"
    ):
        tc.ViTConfig(patch_size=3)
    with pytest.raises(ValueError, match="pool: expected one of"):
        tc.ViTConfig(pool="max")
    with pytest.raises(ValueError, match="d_model"):
        tc.ViTConfig(d_model=30, n_heads=4)


# --- the ViT against torch's own modules -------------------------------------------


def torch_reference(model: tc.ViT):
    """The same ViT from torch's modules: Conv2d patches, cat, + table, encoder layers."""
    c = model.config
    conv = model.patch_embedding.as_conv2d()
    layers = [to_torch(block) for block in model.blocks.blocks]
    final = nn.LayerNorm(c.d_model).double()
    final.load_state_dict(model.blocks.final_norm.state_dict())

    def forward(x):
        tokens = conv(x).flatten(2).transpose(1, 2)  # (B, N, D)
        if c.pool == "cls":
            tokens = torch.cat([model.class_token.expand(len(x), -1, -1), tokens], 1)
        if c.positions:
            tokens = tokens + model.positions.weight
        for layer in layers:
            tokens = layer(tokens)
        tokens = final(tokens)
        pooled = tokens[:, 0] if c.pool == "cls" else tokens.mean(1)
        return F.linear(pooled, model.head.weight, model.head.bias)

    return forward


@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("positions", [True, False])
@pytest.mark.parametrize("patch_size", [1, 2, 4])
def test_vit_equals_torch_modules_values_and_gradients(pool, positions, patch_size):
    model = tiny(pool=pool, positions=positions, patch_size=patch_size)
    reference = torch_reference(model)
    x = images().requires_grad_()
    ours, theirs = model(x), reference(x)
    assert ours.shape == (3, 10)
    torch.testing.assert_close(ours, theirs)
    upstream = torch.randn_like(ours)
    (got,) = torch.autograd.grad(ours, [x], upstream)
    (want,) = torch.autograd.grad(theirs, [x], upstream)
    torch.testing.assert_close(got, want)


def test_a_vit_block_and_a_gpt_block_with_the_same_weights_agree_without_the_mask():
    """Chapters 6 and 7 stack the same Block: only the causal mask differs."""
    model = tiny(d_model=16, n_heads=2)
    gpt = tc.GPT(
        tc.GPTConfig(
            vocab_size=11, block_size=17, n_layers=2, n_heads=2, d_model=16, d_mlp=24
        )
    ).double()
    gpt_block, vit_block = gpt.blocks.blocks[0], model.blocks.blocks[0]
    assert type(gpt_block) is type(vit_block)
    gpt_block.load_state_dict(vit_block.state_dict())  # strict: the same parameters
    x = model.tokens(images())  # (B, L, D)
    torch.testing.assert_close(gpt_block(x), vit_block(x))
    assert not torch.allclose(gpt_block(x, is_causal=True), vit_block(x))


# --- pooling ----------------------------------------------------------------------


def test_class_token_pooling_reads_row_0_and_mean_pooling_averages_the_patches():
    for pool in ("cls", "mean"):
        model = tiny(pool=pool)
        x = images()
        features = model.features(x)  # (B, L, D)
        want = features[:, 0] if pool == "cls" else features.mean(1)
        torch.testing.assert_close(model(x), model.head(want))
    assert tiny(pool="cls").config.n_tokens == 17
    assert tiny(pool="mean").config.n_tokens == 16


def test_without_positions_mean_pooling_cannot_see_where_the_patches_are():
    """A set of patches: shuffling them changes nothing. With positions it does."""
    x = images(2)
    patches = tc.patchify(x, 2)  # (B, 16, 4)
    order = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    shuffled = tc.unpatchify(patches[:, order], (8, 8), 2)
    for pool in ("cls", "mean"):
        model = tiny(pool=pool, positions=False)
        torch.testing.assert_close(model(x), model(shuffled))
        placed = tiny(pool=pool, positions=True)
        assert not torch.allclose(placed(x), placed(shuffled))


def test_a_fresh_vit_gives_every_class_the_same_probability():
    model = tc.ViT(tc.ViTConfig())
    logits = model(images().float())
    assert torch.equal(logits, torch.zeros_like(logits))  # a zero head at the start


def test_parameter_count_adds_up():
    for pool in ("cls", "mean"):
        model = tc.ViT(tc.ViTConfig(pool=pool))
        counts = model.parameter_count()
        assert counts["total"] == sum(p.numel() for p in model.parameters())
        assert counts["class token"] == (64 if pool == "cls" else 0)
        assert counts["positions"] == model.config.n_tokens * 64


# --- attention maps and rollout ------------------------------------------------------


def test_attention_maps_are_each_blocks_weights():
    model = tiny()
    x = images()
    maps = model.attention_maps(x)
    assert len(maps) == 2
    assert all(m.shape == (3, 2, 17, 17) for m in maps)
    for m in maps:
        torch.testing.assert_close(m.sum(-1), torch.ones(3, 2, 17, dtype=F64))
    # block 1's weights are those of its own input, block 0's output
    h = model.blocks.blocks[0](model.tokens(x))
    torch.testing.assert_close(maps[1], model.blocks.blocks[1].attention_weights(h))


def brute_force_rollout(maps, residual):
    B, _, L, _ = maps[0].shape
    result = torch.empty(B, L, L, dtype=maps[0].dtype)
    for b in range(B):
        r = torch.eye(L, dtype=maps[0].dtype)
        for weights in maps:
            a = weights[b].mean(0)
            if residual:
                a = 0.5 * a + 0.5 * torch.eye(L, dtype=a.dtype)
            r = a @ r
        result[b] = r
    return result


@pytest.mark.parametrize("residual", [True, False])
def test_rollout_chains_the_head_averaged_blocks_and_rows_sum_to_1(residual):
    maps = tiny(n_layers=3).attention_maps(images())
    rollout = tc.attention_rollout(maps, residual=residual)
    assert rollout.shape == (3, 17, 17)
    torch.testing.assert_close(rollout, brute_force_rollout(maps, residual))
    torch.testing.assert_close(rollout.sum(-1), torch.ones(3, 17, dtype=F64))
    assert (rollout >= 0).all()


def test_rollout_of_one_block_is_its_mean_weights_half_kept_on_the_diagonal():
    weights = torch.softmax(torch.randn(2, 4, 5, 5, dtype=F64), -1)
    rollout = tc.attention_rollout([weights])
    torch.testing.assert_close(
        rollout, 0.5 * weights.mean(1) + 0.5 * torch.eye(5, dtype=F64)
    )


def test_rollout_errors():
    with pytest.raises(ValueError, match="at least one block"):
        tc.attention_rollout([])
    a = torch.softmax(torch.randn(2, 4, 5, 5), -1)
    with pytest.raises(tc.ShapeError, match=r"maps\[1\]: expected shape"):
        tc.attention_rollout([a, a[:, :, :4, :4]])
    with pytest.raises(tc.ShapeError, match=r"maps\[0\]"):
        tc.attention_rollout([a[0]])


@pytest.mark.parametrize("name", vit.__all__)
def test_every_public_object_names_its_chapter(name):
    assert "Chapter 7" in getattr(vit, name).__doc__


# --- training on the digits --------------------------------------------------------


def test_random_shifts_move_each_image_by_at_most_max_shift_with_zeros_behind():
    x = torch.zeros(50, 1, 8, 8)
    x[:, 0, 3, 4] = 1  # one lit pixel per image, at row 3, column 4
    moved = tc.train_vit.random_shifts(x, 1, torch.Generator().manual_seed(0))
    assert moved.shape == x.shape
    assert torch.equal(moved.sum((1, 2, 3)), torch.ones(50))  # nothing lost at 1 pixel
    where = moved[:, 0].flatten(1).argmax(1)  # (50,) flat index of the lit pixel
    rows, cols = where // 8, where % 8
    assert set(rows.tolist()) == {2, 3, 4}
    assert set(cols.tolist()) == {3, 4, 5}
    assert torch.equal(tc.train_vit.random_shifts(x, 0), x)
    # a pixel moved off the edge is gone, and zeros come in
    edge = torch.zeros(200, 1, 8, 8)
    edge[:, 0, 0, 0] = 1
    sums = tc.train_vit.random_shifts(edge, 1, torch.Generator().manual_seed(1)).sum(
        (1, 2, 3)
    )
    assert set(sums.tolist()) == {0.0, 1.0}


def test_random_shifts_are_set_by_the_generator_and_check_their_input():
    x = torch.rand(4, 3, 8, 8)
    a = tc.train_vit.random_shifts(x, 2, torch.Generator().manual_seed(5))
    b = tc.train_vit.random_shifts(x, 2, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="max_shift: expected an int ≥ 0, got -1"):
        tc.train_vit.random_shifts(x, -1)
    with pytest.raises(tc.ShapeError, match=r"images: expected shape \(B, C, H, W\)"):
        tc.train_vit.random_shifts(x[0], 1)


def test_digit_batches_draw_training_images_and_return_the_whole_test_split():
    digits = tc.load_digits()
    get_batch = tc.train_vit.digit_batches(digits, batch_size=32, max_shift=0, seed=3)
    x, y = get_batch("train", 7)
    assert x.shape == (32, 1, 8, 8)
    assert y.shape == (32,)
    x_again, _ = get_batch("train", 7)
    assert torch.equal(x, x_again)  # the same step, the same batch
    # unshifted, every drawn image is a training image with its label
    train_rows = {
        tuple(r.tolist()): int(label)
        for r, label in zip(digits.x_train.flatten(1), digits.y_train, strict=True)
    }
    assert all(
        train_rows[tuple(r.tolist())] == int(label)
        for r, label in zip(x.flatten(1), y, strict=True)
    )
    x_test, y_test = get_batch("val", 0)
    assert torch.equal(x_test, digits.x_test)
    assert torch.equal(y_test, digits.y_test)


def test_train_on_digits_learns_and_is_deterministic():
    digits = tc.load_digits()
    run = tc.train_vit.DigitsRun(
        model={"d_model": 32, "n_layers": 1, "n_heads": 2},
        train={
            "steps": 300,
            "batch_size": 64,
            "lr": 3e-3,
            "warmup_steps": 5,
            "eval_every": 150,
            "eval_batches": 1,
        },
        max_shift=0,
    )
    model, history = tc.train_vit.train_on_digits(digits, run, seed=0)
    _, history_again = tc.train_vit.train_on_digits(digits, run, seed=0)
    assert history.train_losses == history_again.train_losses
    assert not model.training
    with torch.no_grad():
        accuracy = (model(digits.x_test).argmax(-1) == digits.y_test).float().mean()
    assert history.val_losses[-1] < history.val_losses[0]
    assert history.val_losses[-1] < math.log(10) - 0.5  # below a uniform guess
    assert accuracy > 0.5  # ten classes: 0.1 by chance
    with pytest.raises(ValueError, match="pool"):
        tc.train_vit.train_on_digits(digits, run, pool="max")


@pytest.mark.parametrize("patch_size", [1, 2, 4])
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_flop_count_matches_torch_s_flop_counter(patch_size, pool):
    """The counter sees attention's two products with SDPA's math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = tc.ViT(
        tc.ViTConfig(patch_size=patch_size, pool=pool, d_model=32, n_layers=2)
    )
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        model(torch.zeros(1, 1, 8, 8))
    assert model.flop_count()["total"] == counter.get_total_flops()


def test_smaller_patches_cost_more_and_attention_grows_fastest():
    counts = {
        p: tc.ViT(tc.ViTConfig(patch_size=p, pool="mean")).flop_count()
        for p in (1, 2, 4)
    }
    assert counts[1]["total"] > counts[2]["total"] > counts[4]["total"]
    assert (
        counts[1]["attention"] / counts[2]["attention"]
        > counts[1]["mlp"] / counts[2]["mlp"]
    )
    assert counts[4]["mlp"] > counts[4]["attention"]  # few tokens: the MLP dominates


def test_patch_map_spreads_each_patch_value_over_its_pixels():
    weights = torch.arange(8.0).reshape(2, 4)  # two images, 4 patches of 4×4
    maps = tc.vit.patch_map(weights, 8, 4)
    assert maps.shape == (2, 8, 8)
    assert torch.equal(maps[0, :4, :4], torch.zeros(4, 4))  # patch 0: top left
    assert torch.equal(maps[0, :4, 4:], torch.ones(4, 4))  # patch 1: top right
    assert torch.equal(maps[1, 4:, :4], torch.full((4, 4), 6.0))  # patch 2 of image 1
    # the inverse of patchify's numbering: each patch is constant, its value
    patches = tc.patchify(maps[:, None], 4)  # (2, 4, 16)
    assert torch.equal(patches, weights[..., None].expand(2, 4, 16))
    with pytest.raises(tc.ShapeError, match=r"weights: expected shape \(B, N\)"):
        tc.vit.patch_map(torch.ones(2, 5), 8, 4)
    with pytest.raises(ValueError, match="expected a divisor of image_size 8, got 3"):
        tc.vit.patch_map(torch.ones(2, 4), 8, 3)
