"""Twins of the checks' fixed cases: the same kind of input, other values.

A learner's answer could hold a table of the fixed cases' answers (they are in
this package's source) and a wrong general rule for everything else. So the
unseen check of every exercise (:mod:`.core`) also judges twins of each fixed
case, drawn afresh at each grading:

* :func:`fresh_values`: the same shapes, dtypes, flags and omitted defaults;
  zeros, infinities, ties and outsized values kept; every other value drawn
  independently of the one it replaces;
* :func:`grown`: every size of 2 or more doubled, the sizes still fitting one
  another (:func:`fresh_tiles` fills the tiles);
* for an exercise whose inputs are sizes, :func:`one_size_at_a_time`, with
  :func:`resized` and :func:`other_divisor`;
* where a softmax is inside, a loud twin (:func:`louder`): scores past 88,
  where ``exp`` overflows in float32.

Whatever kind of input a fixed case holds, the unseen inputs then hold it too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "LOUD",
    "default_twins",
    "fresh_tiles",
    "fresh_values",
    "grown",
    "loud_score_scale",
    "louder",
    "one_size_at_a_time",
    "other_divisor",
    "resized",
]

#: How much larger a loud twin's arguments are (see ``Exercise.loud``).
LOUD = 300.0

_INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8)


def default_twins(case: tuple, g: torch.Generator) -> list[tuple]:
    """A fixed case's twins, unless its exercise names its own: fresh values,
    and every size doubled."""
    return [fresh_values(case, g), grown(case, g)]


def fresh_values(case: Any, g: torch.Generator) -> Any:
    """A fixed case's twin: every floating tensor's values drawn afresh, its
    shape, dtype and structure kept.

    Each distinct value becomes a draw of its own, at the tensor's typical
    scale and of either sign, independent of the value it replaces (so that a
    twin does not give itself away by resembling its fixed case); zeros,
    infinities and NaNs stay, equal values stay equal (a row of equal scores
    stays equal), and a value far larger than the others stays about as large
    and of its sign (a test of overflow stays one). Integer tensors (ids,
    positions) are relabelled by a random permutation of 0..max, so ids stay
    ids of the same table and equal ids stay equal. Python numbers, strings,
    booleans and None (sizes, flags, settings) are kept, and lists, tuples and
    dicts are walked.
    """
    if isinstance(case, torch.Tensor):
        if case.is_floating_point():
            return _fresh_floats(case, g)
        if case.dtype in _INTEGERS:
            return _relabelled(case, g)
        return case.clone()
    if type(case) in (list, tuple):
        return type(case)(fresh_values(item, g) for item in case)
    if type(case) is dict:
        return {key: fresh_values(value, g) for key, value in case.items()}
    return case


def _fresh_floats(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Fresh values for ``x``: each distinct value v becomes a draw of its own,
    independent of v, except for what makes the case a kind of its own."""
    if x.numel() == 0:
        return x.clone()
    distinct, index = torch.unique(x.detach().double(), return_inverse=True)
    finite = torch.isfinite(distinct) & (distinct != 0)
    typical = distinct[finite].abs().median() if finite.any() else torch.tensor(1.0)
    # a value far beyond the others (the 1000 of a test of overflow) stays
    # about as large, and of its sign
    large = finite & (distinct.abs() > 8 * typical)
    draws = torch.randn(distinct.shape, generator=g, dtype=torch.float64)
    ordinary = draws * typical
    near = distinct * (
        0.8 + 0.45 * torch.rand(distinct.shape, generator=g, dtype=torch.float64)
    )
    fresh = torch.where(large, near, torch.where(finite, ordinary, distinct))
    # a value that occurs more than once (a row of equal values) gets 8
    # significant bits, so that such a row sums, and averages, exactly
    counts = torch.bincount(index.flatten(), minlength=len(distinct))
    mantissa, exponent = torch.frexp(fresh)
    short = torch.ldexp(torch.round(mantissa * 256) / 256, exponent)
    fresh = torch.where((counts > 1) & finite & ~large, short, fresh)
    return fresh[index].to(x.dtype)


def _relabelled(
    ids: torch.Tensor, g: torch.Generator, high: int | None = None
) -> torch.Tensor:
    """Non-negative ints relabelled by a random permutation of 0..high - 1
    (0..max by default), equal ids staying equal; negative ones (an index to
    ignore) kept."""
    if ids.numel() == 0 or int(ids.max()) <= 0:
        return ids.clone()
    permutation = torch.randperm(high or int(ids.max()) + 1, generator=g)
    return torch.where(
        ids >= 0, permutation[ids.clamp(min=0).long()].to(ids.dtype), ids
    )


def grown(case: Any, g: torch.Generator) -> Any:
    """A fixed case's grown twin: every size of 2 or more doubled, in every
    tensor's shape and every Python int (a head count, a patch size, an
    offset, top-k), so that the sizes still fit one another: D = H·d,
    a patch size that divides the image, the rows of a table the ids index.
    Sizes of 1 stay 1, and ranks, dtypes, flags and choices stay.

    Values are tiled, each tile given fresh values as :func:`fresh_values`
    gives them (see :func:`fresh_tiles`), ids relabelled within the grown
    range: a rule
    that goes wrong only past some size that a fixed case reaches, with a table
    keyed on the fixed cases' shapes, goes wrong here.
    """
    if isinstance(case, torch.Tensor):
        repeats = [2 if n >= 2 else 1 for n in case.shape]
        if case.is_floating_point():
            return fresh_tiles(case, repeats, g)
        grown_tensor = case.repeat(*repeats)
        if case.dtype in _INTEGERS and grown_tensor.numel():  # ids of a grown table
            return _relabelled(grown_tensor, g, 2 * int(grown_tensor.max()) + 2)
        return grown_tensor
    if type(case) is int:
        return 2 * case if case >= 2 else case
    if type(case) in (list, tuple):
        return type(case)(grown(item, g) for item in case)
    if type(case) is dict:
        return {key: grown(value, g) for key, value in case.items()}
    return case


def fresh_tiles(
    x: torch.Tensor, repeats: Sequence[int], g: torch.Generator
) -> torch.Tensor:
    """``x`` tiled ``repeats`` times along each axis (1 or 2), each tile with
    fresh values of its own (see :func:`fresh_values`); a row of equal values
    (along the last axis) stays a row of equal values."""
    grown_tensor = x.repeat(*repeats)
    for tile in itertools.product(
        *(
            [slice(0, n), slice(n, 2 * n)] if r == 2 else [slice(None)]
            for n, r in zip(x.shape, repeats, strict=True)
        )
    ):
        grown_tensor[tile] = _fresh_floats(x, g)
    if x.dim() and repeats[-1] == 2 and x.shape[-1] >= 2:
        equal = (x == x[..., :1]).all(-1, keepdim=True)
        equal = equal.repeat(*repeats[:-1], 1)
        last = x.shape[-1]
        halves = grown_tensor[..., :last].repeat(*[1] * (x.dim() - 1), 2)
        grown_tensor = torch.where(equal, halves, grown_tensor)
    return grown_tensor


def one_size_at_a_time(case: tuple, g: torch.Generator, resize) -> list[tuple]:
    """Twins of a case of sizes: for each argument in turn, a case in which
    ``resize(case, i, g)`` changed argument ``i`` (and whatever must change
    with it), the others kept; ``resize`` returns None for an argument it
    keeps (a flag, a choice). A rule that goes wrong for, say, twelve layers
    is then tried with twelve layers and every other size fresh."""
    twins = []
    for i in range(len(case)):
        changed = resize(case, i, g)
        if changed is not None:
            twins.append(tuple(changed))
    return twins


def resized(n: int, g: torch.Generator, *, multiple_of: int = 1) -> int:
    """A size other than ``n``, near it (about 0.75 n to 1.35 n, and at least
    one step away), and a multiple of ``multiple_of``: for the twins of
    exercises whose inputs are sizes."""
    low = max(1, int(0.75 * n) // multiple_of)
    high = max(low + 1, int(1.35 * n) // multiple_of + 1, n // multiple_of + 1)
    choices = [k * multiple_of for k in range(low, high + 1) if k * multiple_of != n]
    return choices[int(torch.randint(len(choices), (), generator=g))]


def other_divisor(n: int, d: int, g: torch.Generator) -> int | None:
    """A divisor of ``n`` other than ``d``, the nearer ones likelier (a head
    count for a width); None when ``n`` has no other."""
    divisors = [k for k in range(1, n + 1) if n % k == 0 and k != d]
    if not divisors:
        return None
    divisors.sort(key=lambda k: abs(k - d))
    near = divisors[: max(1, min(3, len(divisors)))]
    return near[int(torch.randint(len(near), (), generator=g))]


def louder(case: tuple, positions: Sequence[int], scale: float = LOUD) -> tuple:
    """``case`` with its floating tensors at ``positions`` ``scale`` times
    larger."""
    return tuple(
        value * scale
        if i in positions
        and isinstance(value, torch.Tensor)
        and value.is_floating_point()
        else value
        for i, value in enumerate(case)
    )


def loud_score_scale(q: torch.Tensor, k: torch.Tensor) -> float:
    """How much larger q and k (..., N, d) must both be for the largest score
    q·k/√d to reach :data:`LOUD`: where one input makes both (x makes q and k,
    a block's weights make both), the scores grow as its square."""
    largest = float((q @ k.transpose(-2, -1)).max()) / q.shape[-1] ** 0.5
    return (LOUD / max(largest, 1e-3)) ** 0.5
