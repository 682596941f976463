"""Chapter 7's exercise checks: each usual mistake fails with its hint and loses
points (reference solutions, stubs and degenerate answers:
tests/test_exercise_solutions.py), honest answers written another way get full
marks, the quiz answers follow from the package, and the notebook and the grader
agree."""

import pytest
import torch
from exercise_helpers import (
    edited,
    graded_points_agreeing_with_the_kernel,
    namespace_from,
    read_source,
    solution_cells,
    submission,
    without_markers,
)

import transformer_course as tc
from transformer_course import vit
from transformer_course.exercises import chapter, core
from transformer_course.exercises.ch07 import EXERCISES, QUIZZES
from transformer_course.grading.sandbox import bwrap_problem

REFERENCE = {k: without_markers(v) for k, v in solution_cells(read_source(7)).items()}


def variant(key, *edits):
    """The reference solution of ``key`` with each (old, new) edit made once."""
    return edited(REFERENCE[key], *edits)


def test_references_are_the_reference_solutions():
    """The notebook's own solutions compute what the package computes."""
    namespace = namespace_from(REFERENCE.values())
    g = torch.Generator().manual_seed(0)
    embedding = tc.PatchEmbedding(8, 2, 3, 6).double()
    images = torch.randn(2, 3, 8, 8, generator=g, dtype=torch.float64)
    got = namespace["embed_patches"](
        images, embedding.proj.weight.detach(), embedding.proj.bias.detach(), 2
    )
    torch.testing.assert_close(got, embedding(images).detach())

    model = tc.ViT(tc.ViTConfig(n_layers=2, n_heads=2, d_model=8)).double().eval()
    patch_tokens = model.patch_embedding(images[:, :1])
    got = namespace["vit_input"](
        patch_tokens, model.class_token[0, 0], model.positions.weight
    )
    torch.testing.assert_close(got, model.tokens(images[:, :1]))
    features = model.features(images[:, :1])
    got = namespace["classify"](features, model.head.weight, model.head.bias, "cls")
    torch.testing.assert_close(got, model(images[:, :1]))

    maps = model.attention_maps(images[:, :1])
    torch.testing.assert_close(
        namespace["rollout"](maps), tc.attention_rollout(maps), rtol=0, atol=0
    )
    c = model.config
    assert (
        namespace["vit_flops"](8, 2, 1, c.d_model, c.block_config().d_mlp, 2, 10, True)
        == model.flop_count()["total"]
    )


def test_mean_pooling_reference_matches_the_model():
    namespace = namespace_from(REFERENCE.values())
    model = tc.ViT(tc.ViTConfig(n_layers=1, n_heads=2, d_model=8, pool="mean"))
    model = model.double().eval()
    torch.nn.init.normal_(model.head.weight)  # the zero head would hide the pooling
    images = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    features = model.features(images)
    got = namespace["classify"](features, model.head.weight, model.head.bias, "mean")
    torch.testing.assert_close(got, model(images))


EMBED = "embed_patches"
ROWS_COLS = "grid = grid.permute(0, 2, 4, 1, 3, 5)"
CHANNELS_LAST = variant(EMBED, (ROWS_COLS, "grid = grid.permute(0, 2, 4, 3, 5, 1)"))
BARE_RESHAPE = (
    "def embed_patches(images, weight, bias, patch_size):\n"
    "    B, C, height, width = images.shape\n"
    "    p = patch_size\n"
    "    if height % p or width % p:\n"
    "        raise ValueError(f'{p} does not divide {height}×{width}')\n"
    "    N = (height // p) * (width // p)\n"
    "    return images.reshape(B, N, C * p * p) @ weight.T + bias\n"
)
NO_ERROR = (  # F.unfold drops the pixels that do not fit, silently
    "def embed_patches(images, weight, bias, patch_size):\n"
    "    p = patch_size\n"
    "    patches = F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)\n"
    "    return patches @ weight.T + bias\n"
)
CLASS_LAST = variant(
    "vit_input",
    ("torch.cat([x_0, patch_tokens], dim=1)", "torch.cat([patch_tokens, x_0], dim=1)"),
)
NO_EXPAND = variant(
    "vit_input", ("class_token.expand(B, 1, D)", "class_token.reshape(1, 1, D)")
)
NO_POOL_ERROR = variant(
    "classify",
    (
        '    elif pool == "mean":\n        h = features.mean(dim=1)  # (B, D): (1/N) Σ_n x_n\n'
        '    else:\n        raise ValueError(f\'pool: expected "cls" or "mean", got {pool!r}\')',
        "    else:\n        h = features.mean(dim=1)",
    ),
)
ALWAYS_MEAN = variant("classify", ("h = features[:, 0]", "h = features.mean(dim=1)"))
IS_CLS = variant(  # right in a notebook whose strings are interned, not in general
    "classify", ('if pool == "cls":', 'if pool is "cls":'), ('elif pool == "mean":', 'elif pool is "mean":')
)  # fmt: skip
HEIGHT_ONLY = variant(EMBED, ("if height % p or width % p:", "if height % p:"))
TRANSPOSED = variant("rollout", ("weights.mean(dim=1)", "weights.mean(dim=1).transpose(-2, -1)"))  # fmt: skip
FLOAT32 = variant(
    "vit_flops",
    ("return embedding + n_layers * block + head", "return torch.tensor(embedding + n_layers * block + head, dtype=torch.float32)"),
)  # fmt: skip
REVERSED = variant("rollout", ("A @ result", "result @ A"))
FLOPS = "vit_flops"

MISTAKES = [
    # --- embed_patches
    (EMBED, variant(EMBED, ("patches @ weight.T + bias", "patches @ weight.T")), "Add the bias"),
    (EMBED, variant(EMBED, ("patches @ weight.T + bias", "patches @ weight + bias")), "multiply the flattened patches by its transpose"),
    (EMBED, variant(EMBED, (ROWS_COLS, "grid = grid.permute(0, 4, 2, 1, 3, 5)")), "row by row"),
    (EMBED, CHANNELS_LAST, "Flatten each patch channel first"),
    (EMBED, BARE_RESHAPE, "A reshape alone does not cut patches"),
    (
        EMBED,
        variant(
            EMBED,
            ("patches @ weight.T + bias", "(patches @ weight.T + bias).transpose(1, 2)"),
        ),
        "expected (B, N, D)",
    ),
    # --- vit_input
    ("vit_input", CLASS_LAST, "The class token comes first"),
    (
        "vit_input",
        variant(
            "vit_input",
            ("return x + positions", "return torch.cat([x_0, patch_tokens + positions[1:]], dim=1)"),
        ),
        "The class token gets a position row too",
    ),
    (
        "vit_input",
        variant(
            "vit_input",
            ("return x + positions", "return torch.cat([x_0, patch_tokens + positions[:-1]], dim=1)"),
        ),
        "Prepend x_0 first",
    ),
    ("vit_input", variant("vit_input", ("return x + positions", "return x")), "Add the position table"),
    ("vit_input", NO_EXPAND, "Every image in the batch gets its own copy of x_0"),
    (
        "vit_input",
        variant("vit_input", ("torch.cat([x_0, patch_tokens], dim=1)", "torch.cat([x_0, patch_tokens], dim=2)")),
        "Concatenate along the tokens, dim 1",
    ),
    (  # a (1, 1, D) class token with its position row, for one image only
        "vit_input",
        variant("vit_input", ("return x + positions", "return x + positions[0]")),
        "Row 0 is class_token + positions[0]",
    ),
    # --- classify
    ("classify", variant("classify", ("h = features[:, 0]", "h = features[:, -1]")), "The class token is row 0"),
    ("classify", variant("classify", ("features.mean(dim=1)", "features.sum(dim=1)")), "Average, don't sum"),
    ("classify", variant("classify", ("features.mean(dim=1)", "features[:, 1:].mean(dim=1)")), "has no class token"),
    (
        "classify",
        variant("classify", ("return h @ weight.T + bias", "return (h @ weight.T + bias).softmax(-1)")),
        "Return the logits",
    ),
    ("classify", variant("classify", ("return h @ weight.T + bias", "return h @ weight.T")), "Add the head's bias"),
    ("classify", ALWAYS_MEAN, 'pool="cls" was treated as pool="mean"'),
    ("classify", variant("classify", ("features.mean(dim=1)", "features.mean(dim=-1)")), "Pool over the tokens"),
    ("classify", IS_CLS, "use == instead"),
    # --- rollout
    ("rollout", REVERSED, "Chain the blocks with the last on the left"),
    ("rollout", variant("rollout", ("A @ result", "A * result")), "matrix products"),
    ("rollout", variant("rollout", ("        if residual:\n", "        if False:\n")), "count the skip connection"),
    ("rollout", variant("rollout", ("A = (A + eye) / 2", "A = A + eye")), "Halve A + I"),
    ("rollout", variant("rollout", ("weights.mean(dim=1)", "weights.sum(dim=1)")), "Average the heads"),
    ("rollout", variant("rollout", ("weights.mean(dim=1)", "weights.amax(dim=1)")), "not their maximum"),
    ("rollout", variant("rollout", ("A if result is None else A @ result", "A")), "Chain every block"),
    ("rollout", variant("rollout", ("residual=True):", "residual=False):")), "give residual the default True"),
    ("rollout", variant("rollout", ("        if residual:\n", "        if True:\n")), "With residual=False use"),
    ("rollout", TRANSPOSED, "Keep the maps as they are"),
    # --- vit_flops
    (FLOPS, variant(FLOPS, ("return embedding", "return (embedding"), ("+ head", "+ head) // 2")), "2 FLOPs per multiply-add"),
    (FLOPS, variant(FLOPS, ("L = N + 1 if class_token else N", "L = N")), "L = N + 1 tokens"),
    (FLOPS, variant(FLOPS, ("N = (image_size // patch_size) ** 2", "N = image_size // patch_size")), "N = (H/p)² patches"),
    (FLOPS, variant(FLOPS, (" + 4 * L**2 * D", "")), "Attention also costs 4·L²·D"),
    (FLOPS, variant(FLOPS, ("4 * L * D * d_mlp", "16 * L * D**2")), "use its own width d_mlp"),
    (FLOPS, variant(FLOPS, ("return embedding + ", "return ")), "Count the patch embedding"),
    (FLOPS, variant(FLOPS, (" + head", "")), "Count the head"),
    (FLOPS, FLOAT32, "rounded to torch.float32"),
    (FLOPS, FLOAT32.replace("dtype=torch.float32)", "dtype=torch.float32).item()"), "rounded to float32"),
    (FLOPS, variant(FLOPS, ("return embedding + n_layers * block + head", "import numpy\n    return numpy.array([embedding + n_layers * block + head])")), "not ndarray"),
    (  # the channels folded into the patches: (B, C·N, p·p)
        EMBED,
        variant(EMBED, ("grid = grid.permute(0, 2, 4, 1, 3, 5)", "grid = grid.permute(0, 1, 2, 4, 3, 5)"), ("reshape(B, rows * cols, C * p * p)", "reshape(B, C * rows * cols, p * p)")),
        "every channel included",
    ),
]  # fmt: skip


#: (exercise, answer, the property check that fails, words of its hint)
PROPERTY_MISTAKES = [
    (
        EMBED,
        BARE_RESHAPE,
        "each token depends on its own patch only",
        "must change token 6 alone",
    ),
    (EMBED, NO_ERROR, "a ValueError when p does not divide the image", "raise a ValueError"),
    ("vit_input", CLASS_LAST, "row 0 is x_0 + e_0 for every image", "Row 0 is the same"),
    (
        "classify",
        variant("classify", ("features.mean(dim=1)", "features[:, 0]")),
        "mean pooling ignores the order of the tokens",
        "shuffling the tokens",
    ),
    (
        "classify",
        ALWAYS_MEAN,
        "class-token pooling reads row 0 only",
        "reads the class token's row only",
    ),
    ("classify", NO_POOL_ERROR, "a ValueError for an unknown pool", "raise a ValueError"),
    (  # refuses the one unknown pool it was shown
        "classify",
        variant("classify", ("    else:\n        raise", '    elif pool == "max":\n        raise'), ("return h @", "else:\n        h = features.mean(dim=1)\n    return h @")),
        "a ValueError for an unknown pool",
        "raise a ValueError",
    ),
    (
        "classify",
        variant("classify", ("got {pool!r}", "got something else")),
        "a ValueError for an unknown pool",
        "Name the pool you were given",
    ),
    (
        "classify",
        variant("classify", ("features.mean(dim=1)", "features.mean(dim=1, keepdim=True)"), ("features[:, 0]", "features[:, :1]")),
        "mean pooling ignores the order of the tokens",
        "got (2, 1, 4)",
    ),
    (EMBED, HEIGHT_ONLY, "a ValueError when p does not divide the image", "raise a ValueError"),
    (  # both sides off, by remainders that add up to p
        EMBED,
        variant(EMBED, ("if height % p or width % p:", "if (height + width) % p:")),
        "a ValueError when p does not divide the image",
        "raise a ValueError",
    ),
    (  # "CLS" and "Mean" are not the pools
        "classify",
        variant("classify", ('if pool == "cls":', 'pool = pool.lower()\n    if pool == "cls":')),
        "a ValueError for an unknown pool",
        'For pool="CLS"',
    ),
    (  # refuses only the sizes of the fixed cases
        EMBED,
        variant(EMBED, ("if height % p or width % p:", "if (height, width, p) in {(8, 8, 3), (6, 8, 4), (8, 6, 4)}:")),
        "a ValueError when p does not divide the image",
        "raise a ValueError",
    ),
    (
        EMBED,
        variant(EMBED, ("must divide the image size {height}×{width}", "is wrong")),
        "a ValueError when p does not divide the image",
        "Name both sizes",
    ),
    ("rollout", TRANSPOSED, "every row sums to 1", "Your columns sum to 1"),
    (
        "rollout",
        variant("rollout", ("weights.mean(dim=1)", "weights.mean(dim=1, keepdim=True)")),
        "every row sums to 1",
        "got (2, 1, 5, 5)",
    ),
    (
        "rollout",
        variant("rollout", ("A = (A + eye) / 2", "A = A + eye")),
        "every row sums to 1",
        "must sum to 1",
    ),
    (
        "rollout",
        # the averaged weights pushed through a softmax once more
        variant("rollout", ("weights.mean(dim=1)", "weights.mean(dim=1).softmax(-1)")),
        "no mixing gives the identity",
        "the rollout is the identity",
    ),
]  # fmt: skip


def test_a_natural_answer_without_the_value_error_loses_that_check_only():
    """F.unfold is honest on sizes that divide: it loses the error check alone."""
    exercise = EXERCISES[EMBED]
    report = core.run_exercise(exercise, namespace_from([NO_ERROR])[exercise.function])
    failed = [r.name for r in report.results if not r.passed]
    assert failed == ["a ValueError when p does not divide the image"]
    assert report.score == pytest.approx(exercise.points * 4 / 5)


def test_unseen_cases_are_too_many_to_tabulate():
    from transformer_course.exercises.ch07 import _random_flops, _random_rollouts

    sizes = set()
    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        sizes |= {(c[0], c[1], c[3]) for c in _random_flops(g)}
        for maps, *_ in _random_rollouts(g):
            rows = maps[0].sum(-1)
            torch.testing.assert_close(rows, torch.ones_like(rows))
    assert len(sizes) == 20  # every draw a new model


# Honest answers written another way: full marks.
HONEST = [
    (  # a strided convolution, as PatchEmbedding.as_conv2d says
        EMBED,
        "def embed_patches(images, weight, bias, patch_size):\n"
        "    B, C, height, width = images.shape\n"
        "    p = patch_size\n"
        "    if height % p or width % p:\n"
        "        raise ValueError(f'patch size {p} vs image {height}x{width}')\n"
        "    kernel = weight.reshape(-1, C, p, p)  # (D, C, p, p)\n"
        "    out = F.conv2d(images, kernel, bias, stride=p)  # (B, D, rows, cols)\n"
        "    return out.flatten(2).transpose(1, 2)\n",
    ),
    (  # loops over the grid, einsum
        EMBED,
        "def embed_patches(images, weight, bias, patch_size):\n"
        "    p = patch_size\n"
        "    if images.shape[2] % p or images.shape[3] % p:\n"
        "        raise ValueError(f'{p} must divide {tuple(images.shape[2:])}')\n"
        "    tokens = []\n"
        "    for i in range(0, images.shape[2], p):\n"
        "        for j in range(0, images.shape[3], p):\n"
        "            patch = images[:, :, i : i + p, j : j + p].flatten(1)\n"
        "            tokens.append(torch.einsum('bk,dk->bd', patch, weight) + bias)\n"
        "    return torch.stack(tokens, dim=1)\n",
    ),
    (  # one image at a time, a loop over the tokens
        "vit_input",
        "def vit_input(patch_tokens, class_token, positions):\n"
        "    out = []\n"
        "    for tokens in patch_tokens:\n"
        "        rows = [class_token + positions[0]]\n"
        "        for n in range(len(tokens)):\n"
        "            rows.append(tokens[n] + positions[n + 1])\n"
        "        out.append(torch.stack(rows))\n"
        "    return torch.stack(out)\n",
    ),
    (  # the class token as a (1, 1, D) parameter, repeated
        "vit_input",
        "def vit_input(patch_tokens, class_token, positions):\n"
        "    x_0 = class_token[None, None].repeat(len(patch_tokens), 1, 1)\n"
        "    return torch.cat((x_0, patch_tokens), 1) + positions.unsqueeze(0)\n",
    ),
    (  # a dict of poolings, F.linear
        "classify",
        "POOLINGS = {'cls': lambda x: x[:, 0], 'mean': lambda x: x.mean(1)}\n\n\n"
        "def classify(features, weight, bias, pool):\n"
        "    if pool not in POOLINGS:\n"
        "        raise ValueError(f'unknown pool {pool}, expected cls or mean')\n"
        "    return F.linear(POOLINGS[pool](features), weight, bias)\n",
    ),
    (  # the product written as reduce, with torch.bmm
        "rollout",
        "from functools import reduce\n\n\n"
        "def rollout(maps, residual=True):\n"
        "    mixed = []\n"
        "    for m in maps:\n"
        "        A = m.mean(1)\n"
        "        if residual:\n"
        "            A = 0.5 * A + 0.5 * torch.eye(A.shape[-1])\n"
        "        mixed.append(A)\n"
        "    return reduce(lambda R, A: torch.bmm(A, R), mixed)\n",
    ),
    (  # parts in a dict, floats
        FLOPS,
        "def vit_flops(image_size, patch_size, channels, d_model, d_mlp, n_layers,\n"
        "              n_classes, class_token):\n"
        "    n = (image_size / patch_size) ** 2\n"
        "    t = n + (1 if class_token else 0)\n"
        "    parts = {\n"
        "        'embed': 2 * n * channels * patch_size ** 2 * d_model,\n"
        "        'attn': n_layers * (8 * t * d_model ** 2 + 4 * t * t * d_model),\n"
        "        'mlp': n_layers * 4 * t * d_model * d_mlp,\n"
        "        'head': 2 * d_model * n_classes,\n"
        "    }\n"
        "    return sum(parts.values())\n",
    ),
]


def test_chapter_seven_is_registered():
    ex = chapter(7)
    assert set(ex.exercises) == set(EXERCISES)
    assert set(ex.quizzes) == set(QUIZZES)
    box = ex.quiz("quiz_tokens")
    box.control.value = "5"
    box.submit.click()
    assert "Correct" in box.feedback.value


def test_quiz_answers_follow_from_the_package():
    # 4×4 patches of the 8×8 digits, with a class token
    assert QUIZZES["quiz_tokens"].answer == tc.ViTConfig(patch_size=4).n_tokens

    # halving p from 4 to 2 without a class token: the L² term of attention
    def square_term(p):
        config = tc.ViTConfig(patch_size=p, pool="mean", d_model=32, n_heads=1)
        counts = vit.flop_count(config)
        L, D = config.n_tokens, config.d_model
        assert counts["attention"] == config.n_layers * (8 * L * D**2 + 4 * L**2 * D)
        return config.n_layers * 4 * L**2 * D

    assert QUIZZES["quiz_halving"].answer == square_term(2) / square_term(4)
    # the patch embedding is the Conv2d of the first option
    embedding = tc.PatchEmbedding(8, 4, 3, 5)
    conv = embedding.as_conv2d()
    assert (conv.kernel_size, conv.stride) == ((4, 4), (4, 4))
    option = QUIZZES["quiz_convolution"].options[QUIZZES["quiz_convolution"].answer]
    assert option == "nn.Conv2d(C, D, kernel_size=p, stride=p)"
    # the MLP is the larger part exactly below L = 2D
    D = 16
    for L in (2 * D - 1, 2 * D + 1):
        block = tc.block.flop_count(tc.BlockConfig(d_model=D, n_heads=1), L)
        assert (block["mlp"] > block["attention"]) == (L < 2 * D)


def test_shuffled_patches_leave_a_vit_without_positions_unchanged():
    """quiz_shuffle's answer: with a class token and no positions, the prediction
    does not move when the patches are shuffled."""
    torch.manual_seed(0)
    model = tc.ViT(tc.ViTConfig(n_layers=2, n_heads=2, d_model=8, positions=False))
    model = model.double().eval()
    torch.nn.init.normal_(model.head.weight)
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    patches = tc.patchify(images, 2)  # (B, 16, 4)
    order = torch.randperm(16)
    grid = patches[:, order].reshape(2, 4, 4, 2, 2).permute(0, 1, 3, 2, 4)
    shuffled = grid.reshape(2, 1, 8, 8)  # the same patches, elsewhere
    assert not torch.equal(shuffled, images)
    torch.testing.assert_close(tc.patchify(shuffled, 2), patches[:, order])
    torch.testing.assert_close(model(shuffled), model(images))
    answer = QUIZZES["quiz_shuffle"]
    assert answer.options[answer.answer].startswith("Nothing: the class token")


# --- the notebook and the grader agree (as tests/test_agreement.py, chapter 7) ---

CHAPTER_7 = {
    # honest, but no ValueError for sizes that do not divide
    "embed_patches": NO_ERROR,
    # the class token last
    "vit_input": CLASS_LAST,
    # `pool is "cls"`: the grader's strings, read back from a file, are new
    # objects, and so are the notebook's (core.as_the_grader_loads)
    "classify": IS_CLS,
    # the blocks chained in the wrong order
    "rollout": REVERSED,
    # honest, with floats
    "vit_flops": HONEST[-1][1],
}


@pytest.mark.skipif(bwrap_problem() is not None, reason="no sandbox here")
def test_notebook_and_grader_give_the_same_points(tmp_path, monkeypatch):
    graded = graded_points_agreeing_with_the_kernel(
        submission(CHAPTER_7, chapter=7),
        tmp_path / "07_vit.ipynb",
        tmp_path,
        monkeypatch,
    )
    assert graded == pytest.approx(
        {
            "embed_patches": 4 * 4 / 5,  # loses the error check only
            "vit_input": 0,
            "classify": 0,
            "rollout": 0,
            "vit_flops": 2,
        }
    )


def test_a_float32_count_fails_every_time():
    """Not only when the unseen draw happens to exceed 2**24: a fixed case does."""
    exercise = EXERCISES[FLOPS]
    function = namespace_from([FLOAT32])[exercise.function]
    for _ in range(3):
        report = core.run_exercise(exercise, function)
        assert not report.results[0].passed
        assert report.score == 0
