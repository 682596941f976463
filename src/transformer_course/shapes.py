"""Shape checks with messages that name what was expected and what was given.

Every public function of the course validates its inputs with :func:`expect_shape`,
so a wrong shape fails at the course's boundary with a sentence a learner can act
on, instead of deep inside a ``torch.matmul``.

Shapes are written with the course's fixed symbols (see the Notation page):
``B`` batch, ``N`` tokens, ``D`` model width, ``H`` heads, ``d`` head width,
``V`` vocabulary. A leading ``...`` allows any number of batch dimensions.

Used in every chapter.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = [
    "ShapeError",
    "expect_bool",
    "expect_choice",
    "expect_int",
    "expect_number",
    "expect_positive_int",
    "expect_probability",
    "expect_shape",
    "expect_token_ids",
]


class ShapeError(ValueError):
    """A tensor had the wrong shape. The message names the expected and given shape."""


def _parse(spec: str) -> list[str]:
    cleaned = spec.replace("(", " ").replace(")", " ").replace(",", " ")
    dims = cleaned.split()
    if "..." in dims[1:]:
        raise ValueError(f"'...' may only lead a shape spec, got {spec!r}")
    return dims


def expect_shape(
    tensor: object,
    spec: str,
    name: str = "input",
    known: Mapping[str, int] | None = None,
    **sizes: int,
) -> dict[str, int]:
    """Check ``tensor`` against a shape spec and return the sizes it binds.

    Args:
        tensor: the value to check; anything but a ``torch.Tensor`` is an error.
        spec: symbolic shape such as ``"B N D"``, ``"(..., N, d)"`` or ``"N 3"``.
            A name must have the same size wherever it appears; a number must
            match exactly; ``...`` (first only) matches any leading dimensions.
        name: what the tensor is called in the message, e.g. ``"q"``.
        known: sizes bound by earlier checks, so that several tensors can be
            checked for consistency: ``dims = expect_shape(q, "... N d", "q")``
            then ``expect_shape(k, "... M d", "k", known=dims)``.
        **sizes: sizes fixed by the caller, e.g. ``D=64``.

    Returns:
        dict mapping each symbol in ``spec`` (and in ``known``/``sizes``) to its size.

    Raises:
        ShapeError: with a message like
            ``q: expected shape (..., N, d) with d=8, got (2, 5, 4)``.
        TypeError: if ``tensor`` is not a tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor of shape ({spec}), "
            f"got {type(tensor).__name__}"
        )
    dims = _parse(spec)
    given: dict[str, int] = {**(known or {}), **sizes}
    bound = dict(given)
    shape = tuple(tensor.shape)
    pretty = ", ".join(dims)

    def fail(reason: str) -> ShapeError:
        fixed = [f"{k}={v}" for k, v in given.items() if k in dims]
        extra = f" with {', '.join(fixed)}" if fixed else ""
        return ShapeError(
            f"{name}: expected shape ({pretty}){extra}, got {shape}: {reason}"
        )

    has_ellipsis = bool(dims) and dims[0] == "..."
    named = dims[1:] if has_ellipsis else dims
    if has_ellipsis and len(shape) < len(named):
        raise fail(f"needs at least {len(named)} dimensions, has {len(shape)}")
    if not has_ellipsis and len(shape) != len(named):
        raise fail(f"needs {len(named)} dimensions, has {len(shape)}")

    trailing = shape[len(shape) - len(named) :]
    for symbol, size in zip(named, trailing, strict=True):
        if symbol.isdigit():
            if size != int(symbol):
                raise fail(f"a dimension must be {symbol}, it is {size}")
        elif symbol in bound:
            if bound[symbol] != size:
                raise fail(f"{symbol} must be {bound[symbol]}, it is {size}")
        else:
            bound[symbol] = size
    return bound


def expect_int(value: object, name: str, least: int | None = None) -> int:
    """``value``, if it is an int (not a bool) of at least ``least``; else a
    ValueError naming ``name``, what was expected and what was given."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or (least is not None and value < least)
    ):
        wanted = (
            "an int"
            if least is None
            else "a positive int"
            if least == 1
            else f"an int ≥ {least}"
        )
        raise ValueError(f"{name}: expected {wanted}, got {value!r}")
    return value


def expect_positive_int(value: object, name: str) -> int:
    """``value``, if it is an int ≥ 1 (not a bool); else a ValueError naming ``name``."""
    return expect_int(value, name, least=1)


def expect_bool(value: object, name: str) -> bool:
    """``value``, if it is True or False; else a ValueError naming ``name``."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return value


def expect_choice(value: object, name: str, choices) -> object:
    """``value``, if it is one of ``choices`` (a collection, or a dict's keys);
    else a ValueError naming ``name`` and listing them."""
    if not isinstance(value, str | bool | int | float | type(None)) or (
        value not in choices
    ):
        raise ValueError(f"{name}: expected one of {sorted(choices)}, got {value!r}")
    return value


def expect_number(
    value: object,
    name: str,
    low: float | None = None,
    high: float | None = None,
    above: float | None = None,
) -> float:
    """``value``, if it is a real number (not a bool) with ``low`` ≤ value ≤
    ``high`` and value > ``above`` (each bound optional); else a ValueError."""
    wanted = [
        f"≥ {low:g}" if low is not None else "",
        f"≤ {high:g}" if high is not None else "",
    ]
    wanted += [f"> {above:g}" if above is not None else ""]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (low is not None and not value >= low)
        or (high is not None and not value <= high)
        or (above is not None and not value > above)
    ):
        bounds = " and ".join(w for w in wanted if w)
        raise ValueError(
            f"{name}: expected a number{' ' + bounds if bounds else ''}, got {value!r}"
        )
    return value


def expect_token_ids(
    ids: object, vocab_size: int, name: str = "ids", shape: str = "B N"
) -> None:
    """A ShapeError unless ``ids`` has ``shape`` ((B, N) by default); a
    TypeError unless it holds integers; a ValueError unless every id is in
    0..vocab_size − 1."""
    expect_shape(ids, shape, name)
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name}: expected integer token ids, got dtype {ids.dtype}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(
            f"{name}: expected token ids in 0..{vocab_size - 1}, got values from "
            f"{int(ids.min())} to {int(ids.max())}"
        )


def expect_probability(value: object, name: str) -> float:
    """``value``, if it is a number in [0, 1]; else a ValueError naming ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 <= value <= 1)
    ):
        raise ValueError(f"{name}: expected a probability in [0, 1], got {value!r}")
    return value
