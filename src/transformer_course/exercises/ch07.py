"""Checks and quizzes for exercises/07_vit.ipynb (chapter 7, Vision transformers).

The references are the course's own: :func:`~transformer_course.tokens.patchify`
followed by the linear map (what :class:`~transformer_course.vit.PatchEmbedding`
computes), the class token and the position table of
:meth:`~transformer_course.vit.ViT.tokens`, the pooling of
:meth:`~transformer_course.vit.ViT.pool`,
:func:`~transformer_course.vit.attention_rollout` and
:func:`~transformer_course.vit.flop_count`, in float64. The hints name the
usual mistakes: patches numbered column by column, flattened channels last, or
cut by a bare reshape, the bias forgotten, W not transposed; the class token
last, without its position row, or the positions added before it is
prepended; the last row read instead of the first, Turner's sum instead of the
mean, the class token averaged in, probabilities returned instead of logits;
the blocks chained in the wrong order, the residual forgotten or not halved,
the heads summed or their maximum taken; the class token left out of the
token count, one FLOP per multiply-add, the L² term or the MLP's own width
forgotten.
"""

from __future__ import annotations

import re

import torch

from ..tokens import patchify
from ..vit import ViTConfig, attention_rollout, flop_count
from .core import (
    PROPERTY,
    Check,
    Exercise,
    Failed,
    close,
    each_value,
    expect_returned_shape,
    names_the_sizes,
    returned_values,
    seeded_randn,
    sizes_p_does_not_divide,
    too_many_numbers,
    unseen,
    unseen_check,
)
from .table import Returns, Table, WrongShape
from .twins import fresh_tiles, fresh_values, grown, one_size_at_a_time, resized
from .widgets import load_quizzes

__all__ = ["EXERCISES", "QUIZZES"]


# --- Exercise 1: the patch embedding -------------------------------------------------


def _patches(images, p, *, order="rows", layout="chw"):
    """(B, N, C·p·p) patches of images (B, C, H, W), float64; the mistakes by flags:
    order "columns" numbers them column by column, layout "hwc" flattens each
    patch channels last, layout "reshape" cuts consecutive pixels with a bare
    reshape."""
    images = images.double()
    B, C, H, W = images.shape
    if layout == "reshape":
        return images.reshape(B, (H // p) * (W // p), C * p * p)
    grid = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, rows, p, cols, p)
    if layout == "hwc":
        grid = grid.permute(0, 2, 4, 3, 5, 1)  # (B, rows, cols, p, p, C)
    else:
        grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    if order == "columns":
        grid = grid.transpose(1, 2)  # (B, cols, rows, ...)
    return grid.reshape(B, (H // p) * (W // p), C * p * p)


def _embedded(images, weight, bias, p, *, transpose=True, with_bias=True, **mistake):
    """W p_n + b for every patch n: (B, N, D), float64."""
    patches = _patches(images, p, **mistake)  # (B, N, C·p·p)
    weight = weight.double()
    out = patches @ (weight.T if transpose else weight)  # (B, N, D)
    return out + bias.double() if with_bias else out


def _reference_embedding(images, weight, bias, p):
    return patchify(images.double(), p) @ weight.double().T + bias.double()


def _embedding_case(B, C, H, W, p, D, seed):
    return (
        seeded_randn(B, C, H, W, seed=seed),
        seeded_randn(D, C * p * p, seed=seed + 1) / (C * p * p) ** 0.5,
        seeded_randn(D, seed=seed + 2),
        p,
    )


def _embedding_cases():
    return [
        _embedding_case(2, 1, 8, 8, 2, 5, seed=1),  # the digits' shape
        _embedding_case(1, 3, 4, 6, 2, 12, seed=4),  # C > 1, H != W, D = C·p·p
        _embedding_case(3, 1, 8, 8, 4, 16, seed=7),  # one patch per quarter, D = p·p
        _embedding_case(2, 2, 3, 3, 1, 3, seed=10),  # p = 1: every pixel a token
    ]


def _matmul_failed(outcomes) -> bool:
    """Did a call raise torch's error for a product of mismatched shapes?"""
    return any(
        o.raised_a("RuntimeError") and "cannot be multiplied" in o.message
        for o in outcomes
    )


def _untransposed(message: str) -> bool:
    """Whether torch's "(M×K and D×K) cannot be multiplied" says that both
    operands have the patches' width K: the weight used without its .T."""
    sizes = re.search(r"\((\d+)x(\d+) and (\d+)x(\d+)\)", message)
    return sizes is not None and sizes[2] == sizes[4] != sizes[3]


def _judge_embedding(cases, outcomes):
    if _matmul_failed(outcomes):
        failed = next(o for o in outcomes if o.raised_a("RuntimeError"))
        untransposed = [o for o in outcomes if _untransposed(o.message)]
        if untransposed:
            failed = untransposed[0]
            raise Failed(
                "weight is (D, C·p·p), one row per output as nn.Linear stores it: "
                "multiply the flattened patches by its transpose. Your product "
                f"failed: {failed.message}"
            )
        raise Failed(
            "Flatten each patch to its C·p·p numbers, every channel included: the "
            "patches are (B, N, C·p·p) and weight is (D, C·p·p), one row per output "
            "as in nn.Linear, so the tokens are patches @ weight.T + bias. Your "
            f"product failed: {failed.message}"
        )
    for (images, weight, bias, p), got in each_value(cases, outcomes):
        want = _reference_embedding(images, weight, bias, p)
        if close(got, want):
            continue
        _explain_embedding(images, weight, bias, p, got, tuple(want.shape))


def _explain_embedding(images, weight, bias, p, got, shape):
    """Raise :class:`Failed` with the hint of the mistake that gives ``got``."""
    C = images.shape[1]
    if tuple(got.shape) != shape:
        raise Failed(
            f"Images {tuple(images.shape)} with p = {p} have N = (H/p)·(W/p) = "
            f"{shape[1]} patches, and W maps each to D = {weight.shape[0]} numbers: "
            f"expected (B, N, D) = {shape}, got {tuple(got.shape)}."
        )

    def embedded(**mistake):
        return close(got, _embedded(images, weight, bias, p, **mistake))

    if embedded(with_bias=False):
        raise Failed("Add the bias: token n is W p_n + b, with b of shape (D,).")
    if weight.shape[0] == weight.shape[1] and (
        embedded(transpose=False) or embedded(transpose=False, with_bias=False)
    ):
        raise Failed(
            "weight is (D, C·p·p), one row per output, as in nn.Linear: with the "
            "patches in rows, the W p_n are patches @ weight.T."
        )
    if embedded(order="columns"):
        raise Failed(
            "Number the patches row by row, as chapter 1's patchify does: left to "
            "right along the top row of patches, then the next row down."
        )
    if C > 1 and embedded(layout="hwc"):
        raise Failed(
            "Flatten each patch channel first, as (C, p, p), the layout of a Conv2d "
            "weight (weight.reshape(D, C, p, p)), not channels last."
        )
    if p > 1 and embedded(layout="reshape"):
        raise Failed(
            "A reshape alone does not cut patches: images.reshape(B, N, C·p·p) takes "
            "C·p·p consecutive pixels along a row. Split H and W into (H/p, p) and "
            "(W/p, p) and bring each patch's axes together first (or use chapter "
            "1's patchify)."
        )
    raise Failed(
        "Token n is W p_n + b, with p_n the n-th p×p patch (row by row), flattened "
        "as (C, p, p); compare with patches @ weight.T + bias, patches from "
        "chapter 1's patchify."
    )


def _random_embeddings(g):
    cases = []
    for p in (1, 2, 4):
        B, C = (int(t) for t in torch.randint(1, 4, (2,), generator=g))
        low = 4 if p == 2 else 1  # 4 or 5 patches a row and a column, once
        rows, cols = (int(t) for t in torch.randint(low, 6, (2,), generator=g))
        D = int(torch.randint(1, 20, (), generator=g))
        images = torch.randn(B, C, rows * p, cols * p, generator=g)
        weight = torch.randn(D, C * p * p, generator=g)
        cases.append((images, weight, torch.randn(D, generator=g), p))
    return cases


def _locality_cases():
    images, weight, bias, p = _embedding_case(1, 2, 8, 8, 2, 6, seed=13)
    changed = images.clone()
    changed[:, :, 2:4, 4:6] += 1.0  # the patch in row 1, column 2: n = 1·4 + 2 = 6
    return [(images, weight, bias, p), (changed, weight, bias, p)]


def _judge_locality(cases, outcomes):
    before, after = returned_values(outcomes)
    for got in (before, after):
        expect_returned_shape(
            got, (1, 16, 6), "(B, N, D)", "one 8×8 image, p = 2 and D = 6"
        )
    moved = (after.double() - before.double()).abs().amax(dim=-1)[0] > 1e-6  # (N,)
    if moved.tolist() != [n == 6 for n in range(16)]:
        which = [n for n in range(16) if moved[n]]
        raise Failed(
            "Changing the pixels of one patch (row 1, column 2 of the 4×4 grid, so "
            f"patch 6) must change token 6 alone; tokens {which} changed. Each "
            "token is a function of its own patch's pixels only."
        )


def _embedding_error_cases(g):
    """Four fixed sizes and one drawn afresh (:func:`.core.sizes_p_does_not_divide`)."""
    return [
        _embedding_case(1, 1, H, W, p, 4, seed=16)
        for H, W, p in sizes_p_does_not_divide(g)
    ]


def _judge_embedding_error(cases, outcomes):
    for (images, _, _, p), outcome in zip(cases, outcomes, strict=True):
        H, W = images.shape[-2:]
        if not outcome.raised_a("ValueError"):
            got = (
                f"{outcome.error}: {outcome.message}" if outcome.raised else "no error"
            )
            raise Failed(
                f"Images {tuple(images.shape)} cannot be cut into {p}×{p} patches: "
                f"raise a ValueError that names the sizes (got {got})."
            )
        if not names_the_sizes(outcome.message, H, W, p):
            side = H if H % p else W  # a side that p does not divide
            raise Failed(
                f"Name both sizes in the error message: for images of {H}×{W} "
                f"pixels and p = {p}, say that {p} does not divide {side}."
                + too_many_numbers(outcome.message)
            )


def _patch_embedding_twins(case, g):
    """Fresh values; and a grown twin: the batch, the image's sides and D
    doubled, C and p kept (the weight's C·p·p columns must still fit)."""
    images, weight, bias, p = case
    batch = 2 if images.shape[0] >= 2 else 1
    more_images = fresh_tiles(images, (batch, 1, 2, 2), g)
    return [
        fresh_values(case, g),
        (
            more_images,
            fresh_tiles(weight, (2, 1), g),
            fresh_tiles(bias, (2,), g),
            p,
        ),
    ]


EMBEDDING = Exercise(
    "embed_patches",
    "embed_patches",
    "Exercise 1: patches to tokens",
    4,
    (
        Check("equals patchify, then W p_n + b", _embedding_cases, _judge_embedding),
        unseen_check("the same on unseen images", _random_embeddings, _judge_embedding),
        Check(
            "each token depends on its own patch only",
            _locality_cases,
            _judge_locality,
            PROPERTY,
        ),
        Check(
            "a ValueError when p does not divide the image",
            unseen(_embedding_error_cases),
            _judge_embedding_error,
            PROPERTY,
        ),
    ),
    twins=_patch_embedding_twins,
)

# --- Exercise 2: the class token and the positions ----------------------------------


def _input(patch_tokens, class_token, positions, *, mistake=None):
    """[x_0; x_1 ... x_N] + E: (B, N + 1, D), float64; the mistakes by name."""
    x = patch_tokens.double()
    B = x.shape[0]
    x_0 = class_token.double().expand(B, 1, -1)  # (B, 1, D)
    E = positions.double()  # (N + 1, D)
    if mistake == "last":
        return torch.cat([x, x_0], dim=1) + E
    if mistake == "class token without position":
        return torch.cat([x_0, x + E[1:]], dim=1)
    if mistake == "positions before prepending":
        return torch.cat([x_0, x + E[:-1]], dim=1)
    if mistake == "no positions":
        return torch.cat([x_0, x], dim=1)
    return torch.cat([x_0, x], dim=1) + E  # (B, N + 1, D)


def _input_case(B, N, D, seed):
    return (
        seeded_randn(B, N, D, seed=seed),
        seeded_randn(D, seed=seed + 1),
        seeded_randn(N + 1, D, seed=seed + 2),
    )


def _input_cases():
    return [
        _input_case(1, 16, 8, seed=20),
        _input_case(3, 4, 6, seed=23),
        _input_case(2, 1, 5, seed=26),  # one patch: two tokens
    ]


def _judge_input(cases, outcomes):
    for case, outcome in zip(cases, outcomes, strict=True):
        patch_tokens = case[0]
        mismatch = outcome.raised_a("RuntimeError") and (
            "Sizes of tensors must match" in outcome.message
        )
        if mismatch and "except in dimension 1." not in outcome.message:
            raise Failed(
                "Concatenate along the tokens, dim 1: the class token is one more "
                "row in front of the N patch tokens, (B, N, D) -> (B, N + 1, D). "
                f"Your function raised {outcome.error}: {outcome.message}"
            )
        if mismatch and patch_tokens.shape[0] > 1:
            raise Failed(
                "Every image in the batch gets its own copy of x_0: make the class "
                "token (B, 1, D), e.g. class_token.expand(B, 1, D), before "
                f"concatenating it with the patch tokens (B = {patch_tokens.shape[0]}"
                f" here). Your function raised {outcome.error}: {outcome.message}"
            )
        (got,) = returned_values([outcome])
        if not close(got, _input(*case)):
            _explain_input(*case, got)


def _explain_input(patch_tokens, class_token, positions, got):
    """Raise :class:`Failed` with the hint of the mistake that gives ``got``."""
    B, N, D = patch_tokens.shape
    if tuple(got.shape) != (B, N + 1, D):
        raise Failed(
            f"The class token adds one token: patch tokens (B, N, D) = "
            f"{(B, N, D)} give (B, N + 1, D) = {(B, N + 1, D)}, got "
            f"{tuple(got.shape)}. Concatenate along the tokens (dim 1) and add the "
            "positions."
        )

    def made(mistake):
        return close(got, _input(patch_tokens, class_token, positions, mistake=mistake))

    if made("last"):
        raise Failed(
            "The class token comes first: row 0 is x_0 + e_0, and patch token n "
            "(patch_tokens[:, n - 1], patches counted from 1) is row n, so that "
            "every model reads x_0's final representation at row 0."
        )
    if made("class token without position"):
        raise Failed(
            "The class token gets a position row too: E has N + 1 rows, row 0 for "
            "x_0 and row n for patch n (eq. 7.1 adds E to the whole sequence)."
        )
    if made("positions before prepending"):
        raise Failed(
            "Prepend x_0 first, then add E to all N + 1 rows: patch n (from 1) gets "
            "row n of E, not row n − 1, and x_0 gets row 0."
        )
    if made("no positions"):
        raise Failed(
            "Add the position table E (N + 1, D): without it the model cannot tell "
            "where a patch came from."
        )
    raise Failed(
        "Row 0 is class_token + positions[0] for every image, and row n is "
        "patch_tokens[:, n − 1] + positions[n] for n = 1 ... N."
    )


def _random_inputs(g):
    cases = []
    for _ in range(2):
        B, N, D = (int(t) for t in torch.randint(1, 20, (3,), generator=g))
        cases.append(
            (
                torch.randn(B, N, D, generator=g),
                torch.randn(D, generator=g),
                torch.randn(N + 1, D, generator=g),
            )
        )
    return cases


def _same_x0_cases():
    return [_input_case(4, 3, 6, seed=29)]


def _judge_same_x0(cases, outcomes):
    for (patch_tokens, class_token, positions), got in each_value(cases, outcomes):
        B, N, D = patch_tokens.shape
        expect_returned_shape(got, (B, N + 1, D), "(B, N + 1, D)")
        rows = got[:, 0].double()  # (B, D)
        want = (class_token.double() + positions[0].double()).expand(B, D)
        if not close(rows, want):
            alike = close(rows, rows[:1].expand(B, D))  # the same, but not x_0 + e_0
            raise Failed(
                "Row 0 is x_0 + e_0, the class token plus the first row of the "
                "position table: check which position row it gets, if any."
                if alike
                else "Row 0 is the same for every image, x_0 + e_0: the class token "
                "knows nothing about the image until it attends to the patches."
            )


def _class_token_twins(case, g):
    """Fresh values; and a grown twin: B (when 2 or more), N and D doubled, the
    position table's rows N, or N + 1 with a class token, to match."""
    x, cls, positions = case
    B, N, _ = x.shape
    extra = positions.shape[0] - N  # 1: a row for the class token
    more_x = fresh_tiles(x, (2 if B >= 2 else 1, 2, 2), g)
    more_positions = fresh_tiles(positions, (2, 2), g)
    extra_rows = fresh_tiles(positions, (1, 2), g)  # a third tile: for 2N + 1 rows
    more_positions = torch.cat([more_positions, extra_rows])[: 2 * N + extra]
    return [
        fresh_values(case, g),
        (more_x, fresh_tiles(cls, (2,), g), more_positions),
    ]


CLASS_TOKEN = Exercise(
    "vit_input",
    "vit_input",
    "Exercise 2: the class token and the positions",
    3,
    (
        Check("equals [x_0; patch tokens] + E", _input_cases, _judge_input),
        unseen_check("the same on unseen inputs", _random_inputs, _judge_input),
        Check(
            "row 0 is x_0 + e_0 for every image",
            _same_x0_cases,
            _judge_same_x0,
            PROPERTY,
        ),
    ),
    twins=_class_token_twins,
)

# --- Exercise 3: the pooled head ------------------------------------------------------

POOLS = ("cls", "mean")


def _logits(features, weight, bias, pool, *, mistake=None):
    """(B, classes) logits of the pooled features, float64; the mistakes by name."""
    x = features.double()
    if pool == "cls":
        h = x[:, -1] if mistake == "last row" else x[:, 0]  # (B, D)
    elif mistake == "sum":
        h = x.sum(dim=1)  # (B, D): Turner's Σ_n x_n
    elif mistake == "skip first":
        h = x[:, 1:].mean(dim=1)
    else:
        h = x.mean(dim=1)  # (B, D)
    logits = h @ weight.double().T  # (B, classes)
    if mistake != "no bias":
        logits = logits + bias.double()
    if mistake == "softmax":
        return logits.softmax(dim=-1)
    return logits


def _head_case(B, n, D, classes, pool, seed):
    return (
        seeded_randn(B, n, D, seed=seed),
        seeded_randn(classes, D, seed=seed + 1),
        seeded_randn(classes, seed=seed + 2),
        pool,
    )


def _head_cases():
    return [
        _head_case(2, 17, 8, 10, "cls", seed=40),
        _head_case(3, 16, 8, 10, "mean", seed=43),
        _head_case(1, 5, 4, 3, "cls", seed=46),
        _head_case(2, 4, 6, 2, "mean", seed=49),
    ]


def _judge_head(cases, outcomes):
    for (*_, pool), outcome in zip(cases, outcomes, strict=True):
        if outcome.raised_a("ValueError"):
            raise Failed(
                f'pool was "{pool}", one of the two choices, yet your function raised '
                f"ValueError: {outcome.message}. If you test it with `is`, use == "
                "instead: two equal strings need not be the same object."
            )
    if _matmul_failed(outcomes):
        raise Failed(
            "Pool over the tokens (dim 1) to get h of shape (B, D), then apply the "
            "head, weight (classes, D): logits = h @ weight.T + bias."
        )
    for (features, weight, bias, pool), got in each_value(cases, outcomes):
        if not close(got, _logits(features, weight, bias, pool)):
            _explain_head(features, weight, bias, pool, got)


def _explain_head(features, weight, bias, pool, got):
    """Raise :class:`Failed` with the hint of the mistake that gives ``got``."""
    B, classes = features.shape[0], weight.shape[0]
    if tuple(got.shape) != (B, classes):
        raise Failed(
            f"One row of {classes} logits per image: expected (B, classes) = "
            f"{(B, classes)}, got {tuple(got.shape)}. Pool over the tokens (dim 1), "
            "then apply the head."
        )

    def made(mistake, as_pool=pool):
        return close(got, _logits(features, weight, bias, as_pool, mistake=mistake))

    if made("softmax"):
        raise Failed(
            "Return the logits, G h + b, not probabilities: the cross-entropy loss "
            "applies the softmax itself."
        )
    if made("no bias"):
        raise Failed("Add the head's bias: logits = h @ weight.T + bias.")
    other = "mean" if pool == "cls" else "cls"
    if made(None, as_pool=other):
        raise Failed(
            f'pool="{pool}" was treated as pool="{other}": "cls" reads row 0, the '
            'class token x_0; "mean" averages every row. (Compare strings with ==, '
            "not `is`: two equal strings need not be the same object.)"
        )
    if pool == "cls" and made("last row"):
        raise Failed(
            "The class token is row 0 (it was prepended), not the last row: "
            "h = features[:, 0]."
        )
    if pool == "mean" and made("sum"):
        raise Failed(
            "Average, don't sum: h = (1/N) Σ_n x_n. Turner's sum pooling is N times "
            "the mean; the course's mean keeps h's size independent of the number "
            "of patches."
        )
    if pool == "mean" and made("skip first"):
        raise Failed(
            'A model with mean pooling has no class token: "mean" averages all N '
            "rows, row 0 included."
        )
    raise Failed(
        'h = features[:, 0] for "cls" and features.mean(dim=1) for "mean"; the '
        "logits are h @ weight.T + bias."
    )


def _random_heads(g):
    cases = []
    for pool in POOLS:
        B, n, D, classes = (int(t) for t in torch.randint(1, 20, (4,), generator=g))
        cases.append(
            (
                torch.randn(B, n, D, generator=g),
                torch.randn(classes, D, generator=g),
                torch.randn(classes, generator=g),
                pool,
            )
        )
    return cases


def _shuffle_cases():
    features, weight, bias, _ = _head_case(2, 9, 6, 4, "mean", seed=52)
    order = torch.randperm(9, generator=torch.Generator().manual_seed(53))
    return [
        (features, weight, bias, "mean"),
        (features[:, order], weight, bias, "mean"),
    ]


def _logits_shape(outcomes, B, classes):
    """The returned logits, after checking their shape (B, classes)."""
    values = returned_values(outcomes)
    for got in values:
        expect_returned_shape(
            got, (B, classes), "(B, classes)", "one row of logits per image"
        )
    return values


def _judge_shuffle(cases, outcomes):
    first, shuffled = _logits_shape(outcomes, 2, 4)
    if not close(shuffled, first):
        raise Failed(
            "With mean pooling, shuffling the tokens must not change the logits: "
            "an average does not care about order."
        )


def _cls_reads_row_0_cases():
    features, weight, bias, _ = _head_case(2, 9, 6, 4, "cls", seed=55)
    others = features.clone()
    others[:, 1:] = seeded_randn(2, 8, 6, seed=56)
    return [(features, weight, bias, "cls"), (others, weight, bias, "cls")]


def _judge_cls_reads_row_0(cases, outcomes):
    first, changed = _logits_shape(outcomes, 2, 4)
    if not close(changed, first):
        raise Failed(
            'With pool="cls" the head reads the class token\'s row only: changing '
            "rows 1 ... N must not change the logits."
        )


#: Pools a learner might expect, all unknown to the course's ViT.
OTHER_POOLS = ("max", "avg", "average", "sum", "token", "first", "CLS", "Mean", "none")


def _unknown_pool_cases(g):
    """Every likely unknown pool, and a made-up name drawn afresh."""
    features, weight, bias, _ = _head_case(2, 5, 4, 3, "cls", seed=58)
    length = int(torch.randint(3, 9, (), generator=g))
    letters = torch.randint(ord("a"), ord("z") + 1, (length,), generator=g).tolist()
    made_up = "".join(map(chr, letters))  # never "cls" or "mean": checked below
    if made_up in POOLS:
        made_up += "x"
    return [(features, weight, bias, pool) for pool in (*OTHER_POOLS, made_up)]


def _judge_unknown_pool(cases, outcomes):
    for (*_, pool), outcome in zip(cases, outcomes, strict=True):
        if not outcome.raised_a("ValueError"):
            got = (
                f"{outcome.error}: {outcome.message}" if outcome.raised else "no error"
            )
            raise Failed(
                f'For pool="{pool}", or any pool other than "cls" or "mean", raise a '
                f"ValueError that names the pool you were given (got {got})."
            )
        if pool not in outcome.message:
            raise Failed(
                f'Name the pool you were given in the error message: "{pool}" is '
                "missing from it."
            )


HEAD = Exercise(
    "classify",
    "classify",
    "Exercise 3: the pooled head",
    3,
    (
        Check("equals the pooled logits, both pools", _head_cases, _judge_head),
        unseen_check("the same on unseen inputs", _random_heads, _judge_head),
        Check(
            "mean pooling ignores the order of the tokens",
            _shuffle_cases,
            _judge_shuffle,
            PROPERTY,
        ),
        Check(
            "class-token pooling reads row 0 only",
            _cls_reads_row_0_cases,
            _judge_cls_reads_row_0,
            PROPERTY,
        ),
        Check(
            "a ValueError for an unknown pool",
            unseen(_unknown_pool_cases),
            _judge_unknown_pool,
            PROPERTY,
        ),
    ),
)

# --- Exercise 4: attention rollout ----------------------------------------------------


def _rollout(maps, residual, *, mistake=None):
    """(B, L, L), float64; the mistakes by name."""
    if mistake == "last block":
        maps = maps[-1:]
    combined = None
    for weights in maps:
        weights = weights.double()
        if mistake == "max":
            A = weights.amax(dim=1)
        elif mistake == "sum":
            A = weights.sum(dim=1)
        else:
            A = weights.mean(dim=1)  # (B, L, L)
        if mistake == "transposed":
            A = A.transpose(-2, -1)  # columns summing to 1
        if (residual and mistake != "no residual") or mistake == "always residual":
            eye = torch.eye(A.shape[-1], dtype=A.dtype)
            A = A + eye if mistake == "not halved" else (A + eye) / 2
        if combined is None:
            combined = A
        elif mistake == "reversed":
            combined = combined @ A  # A_1 A_2 ··· A_M
        elif mistake == "elementwise":
            combined = A * combined
        else:
            combined = A @ combined  # A_M ··· A_1
    return combined


def _attention_maps(M, B, H, L, seed):
    """M random attention maps (B, H, L, L), rows summing to 1, not symmetric."""
    g = torch.Generator().manual_seed(seed)
    return [
        (2 * torch.randn(B, H, L, L, generator=g)).softmax(dim=-1) for _ in range(M)
    ]


def _rollout_cases():
    return [
        (_attention_maps(2, 1, 4, 5, seed=60), True),
        (_attention_maps(3, 2, 2, 4, seed=61), True),
        (_attention_maps(3, 2, 3, 6, seed=62), False),
        (_attention_maps(1, 2, 4, 3, seed=63), True),  # one block
        (_attention_maps(2, 2, 2, 4, seed=59),),  # residual by default
    ]


def _rolled(mistake, *, chained=False, residual_only=None):
    """A rollout with ``mistake`` (see :func:`_rollout`), for a case (maps, and
    residual or its default True); None where the mistake cannot show: one
    block for a mistake in the chaining, the other residual setting."""

    def returns(maps, residual=True):
        if (chained and len(maps) < 2) or (
            residual_only is not None and bool(residual) != residual_only
        ):
            return None
        return _rollout(maps, residual, mistake=mistake)

    return returns


ROLLOUT_TABLE = Table(
    reference=lambda maps, residual=True: attention_rollout(
        [m.double() for m in maps], residual
    ),
    case_by_case=True,
    rows=(
        Returns(
            lambda maps, *given: None if given else _rollout(maps, False),
            "rollout(maps), without residual, must count the residual: give "
            "residual the default True, as in def rollout(maps, residual=True).",
        ),
        WrongShape(
            lambda case, got, want: (
                f"{len(case[0])} maps (B, H, L, L) = {tuple(case[0][0].shape)} roll "
                f"out to one (B, L, L) = {tuple(want.shape)} per image (the heads "
                f"averaged), got {tuple(got.shape)}."
            )
        ),
        Returns(
            _rolled("reversed", chained=True),
            "Chain the blocks with the last on the left: R = A'_M ··· A'_2 A'_1. "
            "Token t's row of R follows block M back to block 1, down to the inputs "
            "(rollout = A' @ rollout, block by block).",
        ),
        Returns(
            _rolled("elementwise", chained=True),
            "Chain the blocks with matrix products (@), not elementwise ones: a "
            "path from input j to token t may pass through any token in between.",
        ),
        Returns(
            _rolled("no residual", residual_only=True),
            "With residual=True count the skip connection as attention to oneself: "
            "A' = (A + I) / 2 for every block, before chaining.",
        ),
        Returns(
            _rolled("always residual", residual_only=False),
            "With residual=False use each block's averaged map as it is, A' = A: "
            "add (A + I) / 2 only when residual is True.",
        ),
        Returns(
            _rolled("transposed"),
            "Keep the maps as they are, rows for the queries: row t of A says how "
            "much token t draws from each token, and sums to 1. Transposing them "
            "makes the columns sum to 1 instead.",
        ),
        Returns(
            _rolled("not halved", residual_only=True),
            "Halve A + I: A' = (A + I) / 2 keeps every row summing to 1; A + I makes "
            "the rows sum to 2 per block.",
        ),
        Returns(
            _rolled("sum"),
            "Average the heads (mean over dim 1), don't sum them: each row of the "
            "average still sums to 1.",
        ),
        Returns(
            _rolled("max"), "Average the heads (mean over dim 1), not their maximum."
        ),
        Returns(
            _rolled("last block", chained=True),
            "Chain every block, not only the last: R = A'_M ··· A'_1 with the heads "
            "of each block averaged.",
        ),
    ),
    otherwise="For each block: A = the mean over heads, A' = (A + I)/2 with "
    "residual; then R = A'_M ··· A'_1 (rollout = A' @ rollout, first block first).",
)


def _random_rollouts(g):
    cases = []
    for residual in (True, False):
        M, B, H = (int(t) for t in torch.randint(1, 5, (3,), generator=g))
        L = int(torch.randint(2, 20, (), generator=g))
        maps = [
            (2 * torch.randn(B, H, L, L, generator=g)).softmax(dim=-1) for _ in range(M)
        ]
        cases.append((maps, residual))
    cases.append((cases[0][0],))  # the maps alone: residual by default
    return cases


#: The hint for a rollout that kept the heads axis.
HEADS_AVERAGED = "average the heads (dim 1) away"


def _rows_cases():
    return [
        (_attention_maps(4, 2, 3, 5, seed=64), True),
        (_attention_maps(2, 1, 2, 7, seed=65), False),
    ]


def _judge_rows(cases, outcomes):
    for (maps, _), got in each_value(cases, outcomes):
        B, _, L, _ = maps[0].shape
        expect_returned_shape(got, (B, L, L), "(B, L, L)", HEADS_AVERAGED)
        sums = got.double().sum(dim=-1)
        columns = got.double().sum(dim=-2)
        if not close(sums, torch.ones_like(sums), atol=1e-5) and (
            close(columns, torch.ones_like(columns), atol=1e-5)
        ):
            raise Failed(
                "Your columns sum to 1, not your rows: keep each map's rows as the "
                "queries (row t: how much token t draws from each token); don't "
                "transpose them."
            )
        if not close(sums, torch.ones_like(sums), atol=1e-5):
            raise Failed(
                "Every row of the rollout must sum to 1 (it is a mixture of the "
                "inputs): average the heads and halve A + I. Your rows sum to "
                f"{sums.flatten()[0]:.4g}, for one."
            )


def _identity_cases():
    """Blocks in which every token attends to itself alone."""
    eye = torch.eye(4).expand(2, 3, 4, 4).clone()  # (B, H, L, L)
    return [([eye, eye, eye], True), ([eye, eye], False)]


def _judge_identity(cases, outcomes):
    for _, got in each_value(cases, outcomes):
        expect_returned_shape(got, (2, 4, 4), "(B, L, L)", HEADS_AVERAGED)
        if not close(got, torch.eye(4).expand(2, 4, 4)):
            raise Failed(
                "When every token attends only to itself, nothing mixes: the rollout "
                "is the identity, with or without the residual."
            )


def _rollout_twins(case, g):
    """Fresh attention maps of the same shapes, and grown ones (B, H and L
    doubled), rows summing to 1 again; the residual flag, or its omission,
    kept."""
    maps, *residual = case
    fresh = [m.abs() / m.abs().sum(dim=-1, keepdim=True) for m in fresh_values(maps, g)]
    more = [m.abs() / m.abs().sum(dim=-1, keepdim=True) for m in grown(maps, g)]
    return [(fresh, *residual), (more, *residual)]


ROLLOUT = Exercise(
    "rollout",
    "rollout",
    "Exercise 4: attention rollout",
    4,
    (
        Check("equals tc.attention_rollout", _rollout_cases, ROLLOUT_TABLE),
        unseen_check("the same on unseen maps", _random_rollouts, ROLLOUT_TABLE),
        Check("every row sums to 1", _rows_cases, _judge_rows, PROPERTY),
        Check(
            "no mixing gives the identity", _identity_cases, _judge_identity, PROPERTY
        ),
    ),
    twins=_rollout_twins,
)

# --- Exercise 5: what patches cost ------------------------------------------------------


def _config(image_size, patch_size, channels, d_model, d_mlp, n_layers, n_classes,
            class_token):  # fmt: skip
    return ViTConfig(
        image_size=image_size,
        patch_size=patch_size,
        in_channels=channels,
        n_classes=n_classes,
        n_layers=n_layers,
        n_heads=1,
        d_model=d_model,
        d_mlp=d_mlp,
        pool="cls" if class_token else "mean",
    )


def _flops(image_size, patch_size, channels, d_model, d_mlp, n_layers, n_classes,
           class_token, *, mistake=None):  # fmt: skip
    """The total forward FLOPs of one image, with the mistakes by name."""
    N = (image_size // patch_size) ** 2
    if mistake == "side":
        N = image_size // patch_size
    L = N + 1 if class_token and mistake != "no class token" else N
    D = d_model
    attention = 8 * L * D**2 + (0 if mistake == "no L²" else 4 * L**2 * D)
    mlp = 4 * L * D * (4 * D if mistake == "4D" else d_mlp)
    embedding = 2 * N * channels * patch_size**2 * D
    head = 2 * D * n_classes
    if mistake == "no embedding":
        embedding = 0
    if mistake == "no head":
        head = 0
    total = embedding + n_layers * (attention + mlp) + head
    return total // 2 if mistake == "multiply-adds" else total


def _flop_cases():
    return [
        (8, 2, 1, 32, 64, 2, 10, True),  # the chapter's ViT
        (8, 4, 1, 16, 64, 1, 10, False),
        (32, 4, 3, 48, 96, 3, 100, True),
        (224, 16, 3, 768, 3072, 12, 1000, True),  # ViT-Base/16
        (224, 14, 3, 384, 1536, 12, 1001, True),  # ViT-Small/14: not a float32
    ]


def _judge_flops(cases, outcomes):
    values = returned_values(outcomes, object)
    for case, got, outcome in zip(cases, values, outcomes, strict=True):
        want = flop_count(_config(*case))["total"]
        if isinstance(got, bool) or not isinstance(got, int | float | torch.Tensor):
            given = outcome.value_type or type(got).__name__
            raise Failed(f"Return the count as an int, not {given}.")
        if isinstance(got, torch.Tensor):
            if got.numel() != 1:
                raise Failed(
                    f"Return one number, not a tensor of shape {tuple(got.shape)}."
                )
            if got.dtype in (torch.float16, torch.bfloat16, torch.float32) and (
                got.item() != want
                and got.item() == torch.tensor(want, dtype=got.dtype).item()
            ):
                raise Failed(
                    f"Expected {want:,}, got {got.item():,.0f}: that is the count "
                    f"rounded to {got.dtype}, which holds whole numbers exactly only "
                    "up to 2²⁴ = 16,777,216 (float32). Count in Python ints."
                )
            got = got.item()
        if got == want:
            continue
        if isinstance(got, float) and got == torch.tensor(want).float().item():
            raise Failed(
                f"Expected {want:,}, got {got:,.0f}: that is the count rounded to "
                "float32, which holds whole numbers exactly only up to 2²⁴ = "
                "16,777,216. Count in Python ints."
            )
        _explain_flops(case, got)


def _explain_flops(case, got):
    """Raise :class:`Failed` with the hint of the mistake that gives ``got``."""
    image_size, patch_size, *_, class_token = case
    where = f"(image {image_size}, p = {patch_size})"
    if got == _flops(*case, mistake="multiply-adds"):
        raise Failed("Count 2 FLOPs per multiply-add (one multiply, one add).")
    if class_token and got == _flops(*case, mistake="no class token"):
        raise Failed(
            "With a class token the blocks read L = N + 1 tokens, not N: the patch "
            "embedding alone sees N."
        )
    if got == _flops(*case, mistake="side"):
        raise Failed(
            f"N = (H/p)² patches, not H/p {where}: the image is cut both ways."
        )
    if got == _flops(*case, mistake="no L²"):
        raise Failed(
            "Attention also costs 4·L²·D: the scores Q Kᵀ and the weighted sum of the "
            "values, 2·L²·D each, besides the projections' 8·L·D²."
        )
    if got == _flops(*case, mistake="4D"):
        raise Failed("The MLP costs 4·L·D·d_mlp: use its own width d_mlp, not 4D.")
    if got == _flops(*case, mistake="no embedding"):
        raise Failed("Count the patch embedding too: 2·N·(C·p²)·D.")
    if got == _flops(*case, mistake="no head"):
        raise Failed("Count the head too: 2·D·classes.")
    raise Failed(
        f"Expected {flop_count(_config(*case))['total']:,} {where}, got {got:,}: "
        "patch embedding 2·N·C·p²·D, then per block 8·L·D² + 4·L²·D + 4·L·D·d_mlp, "
        "then the head 2·D·classes."
    )


def _random_flops(g):
    cases = []
    for class_token in (True, False):
        p = int(torch.randint(1, 17, (), generator=g))
        side = int(torch.randint(1, 17, (), generator=g))
        D = int(torch.randint(1, 1025, (), generator=g))
        C = int(torch.randint(1, 5, (), generator=g))
        M = int(torch.randint(5 if class_token else 1, 25, (), generator=g))
        d_mlp = int(torch.randint(1, 4097, (), generator=g))
        classes = int(torch.randint(1, 2001, (), generator=g))
        cases.append((side * p, p, C, D, d_mlp, M, classes, class_token))
    return cases


def _resize_flops(case, i, g):
    """One size of a ViT changed: the grid's side (the image a multiple of p
    still), p (the grid kept), C, D, d_mlp, the depth or the classes; the class
    token kept."""
    image, p, *rest = case
    side = image // p
    if i == 0:
        return (resized(side, g) * p, p, *rest)
    if i == 1:
        q = resized(p, g)
        return (side * q, q, *rest)
    if i < len(case) - 1:
        changed = list(case)
        changed[i] = resized(case[i], g)
        return tuple(changed)
    return None


FLOPS = Exercise(
    "vit_flops",
    "vit_flops",
    "Exercise 5: what patches cost",
    2,
    (
        Check("equals tc.vit.flop_count", _flop_cases, _judge_flops),
        unseen_check("the same for unseen models", _random_flops, _judge_flops),
    ),
    twins=lambda case, g: one_size_at_a_time(case, g, _resize_flops),
    mutable_inputs=False,  # numbers and strings only: nothing to change in place
)

EXERCISES: dict[str, Exercise] = {
    e.key: e for e in (EMBEDDING, CLASS_TOKEN, HEAD, ROLLOUT, FLOPS)
}

QUIZZES = load_quizzes("ch07")  # quizzes/ch07.toml
