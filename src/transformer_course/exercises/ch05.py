"""Checks and quizzes for exercises/05_positions.ipynb (chapter 5, Positions).

The references are the course's own
:func:`~transformer_course.positions.sinusoidal_positions`,
:func:`~transformer_course.positions.position_angles`,
:func:`~transformer_course.positions.apply_rotary` (interleaved pairs (2i, 2i+1),
ω_i = 10000^(−2i/d)) and :func:`~transformer_course.positions.alibi_bias`, in
float64. The hints name the usual mistakes: sine and
cosine swapped, the exponent k/D (the pair index without its 2) or i/D (the
feature index), positions counted from 1, the two halves of the features paired
instead of neighbours; a rotation by −θ, one angle for every pair, the offset
forgotten; concatenating instead of adding, the slice ``table[offset:N]``; only
one of q and k rotated, the positions swapped, a stray 1/√d; ALiBi's
heads numbered from 0, the sign or the absolute value of the distance lost.
"""

from __future__ import annotations

from functools import partial

import torch

from ..positions import (
    alibi_bias,
    apply_rotary,
    position_angles,
    sinusoidal_positions,
)
from .core import (
    PROPERTY,
    Check,
    Exercise,
    Failed,
    close,
    each_value,
    returned_values,
    seeded_randn,
    unseen,
    unseen_check,
)
from .table import Holds, Returns, Table, WrongShape
from .twins import one_size_at_a_time, resized
from .widgets import load_quizzes

__all__ = ["EXERCISES", "QUIZZES"]

# positions up to ~100 in float32 lose ~1e-5 in the angle: atol 1e-4
_close = partial(close, atol=1e-4)


def _close_table(got, want, N: int) -> bool:
    """A sinusoidal table of N positions within float32's error: the angle n·ω
    of position n carries about n · 6e-8 of rounding (1.2e-4 at n = 2048, past
    ``_close``'s 1e-4: an honest float32 table failed 2 to 3 gradings in 100)."""
    return close(got, want, atol=1e-4 + 2.5e-7 * N)


BASE = 10000.0


def _frequencies(width: int, exponent: str = "pair") -> torch.Tensor:
    """ω for each feature pair (width/2,), float64; the mistakes by ``exponent``:
    "pair" ω_k = base^(−2k/width) (right), "k" base^(−k/width) (the 2 forgotten),
    "one" ω = 1 for every pair (one angle for all pairs), "doubled"
    base^(−4k/width) (2k/D with k the feature index 0, 2, 4, ...)."""
    if exponent == "one":
        return torch.ones(width // 2, dtype=torch.float64)
    k = torch.arange(width // 2, dtype=torch.float64)
    factor = {"pair": 2, "k": 1, "doubled": 4}[exponent]
    return BASE ** (-factor * k / width)


# --- Exercise 1: the sinusoidal table -------------------------------------------------


def _table(N, D, *, swap=False, exponent="pair", start=0, layout="interleaved"):
    """The (N, D) table, float64, with the mistakes by their flags."""
    n = torch.arange(start, start + N, dtype=torch.float64)[:, None]  # (N, 1)
    if exponent in ("feature", "feature2"):
        # every feature i its own frequency base^(−i/D) (or base^(−2i/D))
        i = torch.arange(D, dtype=torch.float64)
        factor = 2 if exponent == "feature2" else 1
        angles = n * BASE ** (-factor * i / D)  # (N, D)
        even = torch.arange(D) % 2 == 0
        first, second = (
            (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
        )
        return torch.where(even, first, second)
    angles = n * _frequencies(D, exponent)  # (N, D/2)
    sin, cos = angles.sin(), angles.cos()
    if swap:
        sin, cos = cos, sin
    if layout == "halves":
        return torch.cat((sin, cos), dim=-1)  # (N, D): all sines, then all cosines
    return torch.stack((sin, cos), dim=-1).flatten(-2)  # (N, D), interleaved


def _table_cases():
    return [(6, 4), (10, 8), (1, 2), (50, 16)]


TABLE_TABLE = Table(
    reference=lambda N, D: sinusoidal_positions(N, D, dtype=torch.float64),
    equal=lambda got, want: _close_table(got, want, want.shape[0]),
    row_equal=_close,
    case_by_case=True,
    rows=(
        Holds(  # not when N = D: then a transposed table has the right shape
            lambda case, got: tuple(got.shape) == case[::-1] != case,
            lambda case, got, want: (
                f"One row per position: the table is (N, D) = {case}, got {case[::-1]}."
            ),
            example_of=lambda N, D: torch.zeros(D, N),
        ),
        WrongShape(
            lambda case, got, want: (
                f"For N = {case[0]} tokens and D = {case[1]} features the table is "
                f"(N, D) = {case}, got {tuple(got.shape)}."
            )
        ),
        Returns(
            lambda N, D: _table(N, D, swap=True),
            "Sine and cosine are swapped: PE[n, 2k] = sin(n ω_k) on the even "
            "features, PE[n, 2k+1] = cos(n ω_k) on the odd ones (row 0 is "
            "0, 1, 0, 1, ...).",
        ),
        Returns(
            lambda N, D: _table(N, D, start=1),
            "Count positions from 0: the first token is at n = 0, so row 0 is "
            "0, 1, 0, 1, ... (sin 0 = 0, cos 0 = 1).",
        ),
        Returns(
            lambda N, D: _table(N, D, exponent="k"),
            "The exponent is 2k/D, with k the pair index (k = 0 ... D/2 − 1): "
            "ω_k = 1 / 10000^(2k/D). With k/D the frequencies only fall to "
            "10000^(−1/2) instead of nearly 10000^(−1).",
        ),
        Returns(
            lambda N, D: _table(N, D, exponent="doubled"),
            "Your frequencies fall twice as fast as they should: with k the feature "
            "index (0, 2, 4, ...) the exponent 2k/D counts each pair twice. In "
            "ω_k = 1 / 10000^(2k/D), k is the pair index, 0, 1, ... D/2 − 1 "
            "(or write 10000^(i/D) with the even feature index i = 2k).",
        ),
        Returns(
            lambda N, D: [
                _table(N, D, exponent="feature"),
                _table(N, D, exponent="feature2"),
            ],
            "Both features of a pair, 2k and 2k+1, share one frequency "
            "ω_k = 1 / 10000^(2k/D), with k the pair index: use the pair index, "
            "not the feature index, in the exponent.",
        ),
        Returns(
            lambda N, D: _table(N, D, layout="halves"),
            "Interleave the pairs: sin(n ω_k) at feature 2k and cos(n ω_k) at "
            "feature 2k+1, not all sines in the first half and all cosines in the "
            "second (x[:, 0::2] and x[:, 1::2]).",
        ),
    ),
    otherwise="PE[n, 2k] = sin(n / 10000^(2k/D)) and PE[n, 2k+1] = cos(n / 10000^(2k/D)) "
    "for n = 0 ... N − 1 and k = 0 ... D/2 − 1; compare with "
    "tc.sinusoidal_positions(N, D) in a cell of its own.",
)


def _random_tables(g):
    """Three sizes, one small, one long, one wide: too many (N, D) to tabulate."""
    small = (
        int(torch.randint(1, 65, (), generator=g)),
        2 * int(torch.randint(1, 17, (), generator=g)),
    )
    long = (
        int(torch.randint(500, 2049, (), generator=g)),
        2 * int(torch.randint(1, 33, (), generator=g)),
    )
    wide = (
        int(torch.randint(1, 129, (), generator=g)),
        2 * int(torch.randint(64, 257, (), generator=g)),
    )
    return [small, long, wide]


def _norm_cases():
    return [(20, 6), (7, 32)]


def _judge_norms(cases, outcomes):
    for (N, D), got in each_value(cases, outcomes):
        if tuple(got.shape) != (N, D):
            raise Failed(f"The table is (N, D) = {(N, D)}.")
        norms = got.double().norm(dim=-1)
        if not close(norms, torch.full_like(norms, (D / 2) ** 0.5), atol=1e-4):
            raise Failed(
                "Every row is D/2 points (sin, cos) on the unit circle, so its norm "
                f"is √(D/2) = {(D / 2) ** 0.5:.4f} for D = {D}: pair each sine with "
                "the cosine of the same angle."
            )


def _judge_distance(cases, outcomes):
    for (N, D), got in each_value(cases, outcomes):
        if tuple(got.shape) != (N, D):
            raise Failed(f"The table is (N, D) = {(N, D)}.")
        gram = got.double() @ got.double().T  # (N, N): PE(n) · PE(m)
        if not close(gram[1:, 1:], gram[:-1, :-1], atol=1e-4):
            raise Failed(
                "PE(n) · PE(n′) must depend on n − n′ only (eq. 5.3): each pair must be "
                "(sin, cos) of the same angle n ω_k."
            )


def _resize_table(case, i, g):
    """N, or D (even), changed."""
    N, D = case
    return (resized(N, g), D) if i == 0 else (N, resized(D, g, multiple_of=2))


SINUSOIDAL = Exercise(
    "sinusoidal_table",
    "sinusoidal_table",
    "Exercise 1: the sinusoidal table",
    3,
    (
        Check("equals tc.sinusoidal_positions(N, D)", _table_cases, TABLE_TABLE),
        unseen_check("the same for unseen sizes", _random_tables, TABLE_TABLE),
        Check("every row has norm √(D/2)", _norm_cases, _judge_norms, PROPERTY),
        Check(
            "PE(n) · PE(n′) depends on n − n′ only",
            _norm_cases,
            _judge_distance,
            PROPERTY,
        ),
    ),
    twins=lambda case, g: one_size_at_a_time(case, g, _resize_table),
    mutable_inputs=False,  # numbers and strings only: nothing to change in place
)

# --- Exercise 2: applying RoPE --------------------------------------------------------


def _rotate(x, positions, *, sign=1, exponent="pair", layout="interleaved"):
    """Turn token n of x (..., N, d) by positions[n]·ω, float64; mistakes by flags."""
    d = x.shape[-1]
    angles = positions.double()[:, None] * _frequencies(d, exponent)  # (N, d/2)
    angles = sign * angles
    x = x.double()
    if layout == "halves":  # GPT-NeoX: feature i with feature i + d/2
        first, second = x[..., : d // 2], x[..., d // 2 :]
    else:
        first, second = x[..., 0::2], x[..., 1::2]
    cos, sin = angles.cos(), angles.sin()
    one, two = first * cos - second * sin, first * sin + second * cos
    if layout == "halves":
        return torch.cat((one, two), dim=-1)
    return torch.stack((one, two), dim=-1).flatten(-2)


def _reference_rope(x, offset):
    angles = position_angles(x.shape[-2], x.shape[-1], BASE, offset)  # (N, d/2)
    return apply_rotary(x.double(), angles)


def _rope_cases():
    return [
        (seeded_randn(5, 4, seed=1), 0),
        (seeded_randn(2, 3, 6, 8, seed=2), 5),  # (B, H, N, d)
        (seeded_randn(2, 4, 6, seed=3, dtype=torch.float64), 17),
    ]


def _judge_rope(cases, outcomes):
    cases = [(*case, 0) if len(case) == 1 else case for case in cases]  # default
    for (x, offset), got in each_value(cases, outcomes):
        if not _close(got, _reference_rope(x, offset)):
            _explain_rope(x, offset, got)


def _explain_rope(x, offset, got):
    """Raise :class:`Failed` with the hint of the mistake that gives ``got``."""
    if got.shape != x.shape:
        raise Failed(
            f"RoPE keeps the shape (..., N, d) = {tuple(x.shape)}, got "
            f"{tuple(got.shape)}."
        )
    N = x.shape[-2]
    positions = torch.arange(offset, offset + N)

    def rotated(positions=positions, **mistake):
        return _close(got, _rotate(x, positions, **mistake))

    if offset and rotated(torch.arange(N)):
        raise Failed(
            f"Add the offset: token n is at position offset + n = {offset} + n, "
            "not n (the tokens before it are in a KV cache)."
        )
    if rotated(positions + 1):
        raise Failed(
            "Count positions from 0: token n is at position offset + n, so with "
            "offset 0 the first token is at position 0 and is not turned at all."
        )
    if rotated(sign=-1):
        raise Failed(
            "You turned by −θ: x̃_{2i} = x_{2i} cos θ − x_{2i+1} sin θ and "
            "x̃_{2i+1} = x_{2i} sin θ + x_{2i+1} cos θ (counter-clockwise)."
        )
    if rotated(layout="halves") or rotated(layout="halves", sign=-1):
        raise Failed(
            "Pair neighbouring features, (x_2i, x_2i+1), as the text says "
            "(x[..., 0::2] and x[..., 1::2]), not feature i with feature i + d/2 "
            "(the half-split form of GPT-NeoX)."
        )
    if rotated(exponent="one"):
        raise Failed(
            "Each pair i turns at its own frequency ω_i = 10000^(−2i/d): "
            "θ = (offset + n)·ω_i, not the same angle for every pair."
        )
    if rotated(exponent="k"):
        raise Failed(
            "The exponent is 2i/d, with i the pair index (i = 0 ... d/2 − 1): "
            "ω_i = 10000^(−2i/d)."
        )
    if close(got.double(), x.double(), atol=1e-6):
        raise Failed("Turn every pair of token n by its angle: x came back unchanged.")
    raise Failed(
        "Turn pair (x_2i, x_2i+1) of token n by θ = (offset + n)·10000^(−2i/d): "
        "x̃_{2i} = x_{2i} cos θ − x_{2i+1} sin θ, x̃_{2i+1} = x_{2i} sin θ + x_{2i+1} cos θ."
    )


def _random_rope(g):
    cases = []
    for dtype in (torch.float32, torch.float64):
        lead = torch.randint(
            1, 4, (int(torch.randint(0, 3, (), generator=g)),), generator=g
        )
        N = int(torch.randint(1, 12, (), generator=g))
        d = 2 * int(torch.randint(1, 9, (), generator=g))
        offset = int(torch.randint(0, 60, (), generator=g))
        x = torch.randn(*lead.tolist(), N, d, generator=g, dtype=dtype)
        cases.append((x, offset))
    # and the default offset, 0, left out
    cases.append(
        (torch.randn(2, int(torch.randint(1, 9, (), generator=g)), 4, generator=g),)
    )
    return cases


def _length_cases():
    return [(seeded_randn(3, 7, 8, seed=4), 0), (seeded_randn(2, 5, 6, seed=5), 11)]


def _judge_lengths(cases, outcomes):
    for (x, _), got in each_value(cases, outcomes):
        if got.shape != x.shape:
            raise Failed(f"RoPE keeps the shape (..., N, d) = {tuple(x.shape)}.")
        if not close(got.double().norm(dim=-1), x.double().norm(dim=-1), atol=1e-4):
            raise Failed(
                "A rotation keeps lengths: every query or key must keep its norm. "
                "Use cos and sin of the same angle θ for both features of a pair."
            )


def _first_token_cases():
    return [(seeded_randn(4, 6, seed=6), 0), (seeded_randn(2, 2, 3, 4, seed=7), 0)]


def _judge_first_token(cases, outcomes):
    for (x, _), got in each_value(cases, outcomes):
        if got.shape != x.shape or not _close(got[..., 0, :], x[..., 0, :]):
            raise Failed(
                "With offset 0 the first token is at position 0: its angle is 0 and "
                "it comes back unchanged."
            )


def _shift_cases():
    qk = seeded_randn(2, 6, 8, seed=8)  # qk[0]: queries, qk[1]: keys
    return [(qk, 0), (qk, 9)]


def _judge_shift(cases, outcomes):
    (qk, _), _ = cases
    first, shifted = returned_values(outcomes)
    if first.shape != qk.shape or shifted.shape != qk.shape:
        raise Failed(f"RoPE keeps the shape (..., N, d) = {tuple(qk.shape)}.")
    scores = first[0].double() @ first[1].double().T  # (N, N): q_n · k_m
    moved = shifted[0].double() @ shifted[1].double().T
    if not _close(moved, scores):
        raise Failed(
            "Moving every token by the same offset must not change any score q'_m · k'_n "
            "(eq. 5.6): turn queries and keys the same way, by (offset + n)·ω_i."
        )


ROPE = Exercise(
    "apply_rope",
    "apply_rope",
    "Exercise 2: rotary positions (RoPE)",
    4,
    (
        Check("equals the course's apply_rotary, any offset", _rope_cases, _judge_rope),
        unseen_check("the same on unseen inputs", _random_rope, _judge_rope),
        Check(
            "keeps the norm of every vector", _length_cases, _judge_lengths, PROPERTY
        ),
        Check(
            "with offset 0 the first token is unchanged",
            _first_token_cases,
            _judge_first_token,
            PROPERTY,
        ),
        Check(
            "scores are the same after shifting every position",
            _shift_cases,
            _judge_shift,
            PROPERTY,
        ),
    ),
)

# --- Exercise 3: learned positions, with an offset -----------------------------------


def _learned_cases():
    return [
        (seeded_randn(2, 4, 6, seed=10), seeded_randn(10, 6, seed=11), 0),
        (seeded_randn(1, 3, 6, seed=12), seeded_randn(10, 6, seed=11), 4),
        (
            seeded_randn(3, 5, 4, seed=13),
            seeded_randn(8, 4, seed=14),
            3,
        ),  # offset + N = max_len
        (
            seeded_randn(2, 1, 4, seed=15),
            seeded_randn(8, 4, seed=14),
            7,
        ),  # one token, the last row
    ]


SLICE_HINT = (
    "Token n is at position offset + n: the rows are table[offset : offset + N], "
    "N rows whatever the offset. A slice that starts or stops elsewhere "
    "(table[offset:N], table[offset + 1 : offset + N + 1]) has fewer rows than "
    "tokens for some offsets."
)


def _judge_learned(cases, outcomes):
    cases = [(*case, 0) if len(case) == 2 else case for case in cases]  # default
    for (x, table, offset), outcome in zip(cases, outcomes, strict=True):
        if (
            outcome.raised_a("RuntimeError")
            and "must match the size" in outcome.message
        ):
            raise Failed(SLICE_HINT)
        N, D = x.shape[1:]
        if outcome.raised_a("ValueError") and offset + N <= table.shape[0]:
            raise Failed(
                f"Positions {offset} ... {offset + N - 1} fit a table of "
                f"{table.shape[0]} rows (its last row is {table.shape[0] - 1}), yet "
                "your function raised a ValueError: raise it only when offset + N > "
                "max_len."
            )
        (got,) = returned_values([outcome])
        rows = table[offset : offset + N]  # (N, D)
        if _close(got, x + rows):
            continue
        if got.shape[:-1] == x.shape[:-1] and got.shape[-1] == 2 * D:
            raise Failed(
                "Add the position vectors, x + rows, don't concatenate them: the width "
                "stays D, and a linear map after a concatenation is an addition "
                "anyway (eq. 5.1)."
            )
        if got.shape != x.shape:
            raise Failed(
                f"The output has the tokens' shape (B, N, D) = {tuple(x.shape)}, got "
                f"{tuple(got.shape)}."
            )
        if offset and _close(got, x + table[:N]):
            raise Failed(
                f"Start at row offset = {offset}: token n is at position offset + n, so "
                "add table[offset : offset + N], not table[:N]."
            )
        if offset + N < table.shape[0] and _close(
            got, x + table[offset + 1 : offset + N + 1]
        ):
            raise Failed(
                "Off by one: the first token is at position offset, row table[offset] "
                "(positions count from 0)."
            )
        if _close(got, x + table[offset]):
            raise Failed(
                "Each token gets its own row: token n gets table[offset + n], not "
                "table[offset] for all of them."
            )
        if _close(got, rows.expand_as(x)):
            raise Failed(
                "Add the rows to the tokens: return x + rows, not the rows alone."
            )
        raise Failed("Return x + table[offset : offset + N], broadcast over the batch.")


def _random_learned(g):
    cases = []
    for _ in range(3):
        B, N, D = (int(t) for t in torch.randint(1, 7, (3,), generator=g))
        max_len = N + int(torch.randint(0, 20, (), generator=g))
        offset = int(torch.randint(0, max_len - N + 1, (), generator=g))
        if not cases:  # the first window ends exactly at the table's last row
            offset = max_len - N
        x = torch.randn(B, N, D, generator=g)
        cases.append((x, torch.randn(max_len, D, generator=g), offset))
    # and the default offset, 0, left out
    x = torch.randn(2, int(torch.randint(1, 6, (), generator=g)), 3, generator=g)
    cases.append((x, torch.randn(x.shape[1] + 2, 3, generator=g)))
    return cases


def _too_long_cases(g):
    """Three fixed cases and one drawn afresh, so that an answer cannot list the
    cases it refuses."""
    table = seeded_randn(5, 4, seed=16)
    fixed = [
        (seeded_randn(1, 3, 4, seed=17), table, 3),  # positions 3, 4, 5: two rows left
        (seeded_randn(2, 3, 4, seed=18), table, 4),  # one row left: it would broadcast
        (seeded_randn(1, 6, 4, seed=19), table, 0),  # longer than the table
        (seeded_randn(1, 1, 4, seed=15), table, 6),  # starts past the end
    ]
    sizes = {(x.shape[1], len(t), offset) for x, t, offset in fixed}
    while True:  # (N, max_len, offset) unlike every fixed case
        N, D = (int(t) for t in torch.randint(1, 7, (2,), generator=g))
        max_len = N + int(torch.randint(0, 10, (), generator=g))
        offset = max_len - N + int(torch.randint(1, 4, (), generator=g))  # too far
        if (N, max_len, offset) not in sizes:
            break
    drawn = (torch.randn(1, N, D, generator=g), torch.randn(max_len, D, generator=g))
    return [*fixed, (*drawn, offset)]


def _judge_too_long(cases, outcomes):
    for (x, table, offset), outcome in zip(cases, outcomes, strict=True):
        if not outcome.raised_a("ValueError"):
            N, max_len = x.shape[1], table.shape[0]
            why = (
                f"Your function raised {outcome.error}: a slice past the end of the "
                "table is shorter than x, and only the shapes failed to match, "
                "later. Check the sizes before slicing"
                if outcome.raised
                else "Your function raised nothing: slicing past the end does not "
                "fail, and a single row left would be added to every token silently"
            )
            raise Failed(
                f"Positions {offset} ... {offset + N - 1} do not fit a table of "
                f"{max_len} rows: raise a ValueError when offset + N > max_len. "
                f"{why}."
            )


def _chunk_cases():
    x, table = seeded_randn(2, 7, 5, seed=20), seeded_randn(9, 5, seed=21)
    return [(x, table, 0), (x[:, 4:].clone(), table, 4)]


def _judge_chunk(cases, outcomes):
    whole, tail = returned_values(outcomes)
    if whole.shape != cases[0][0].shape or tail.shape != cases[1][0].shape:
        raise Failed("The output has the tokens' shape (B, N, D).")
    if not _close(tail, whole[:, 4:]):
        raise Failed(
            "The last 3 tokens of a sequence, given with offset 4, must get the same "
            "positions as in the whole sequence: rows 4, 5, 6."
        )


LEARNED = Exercise(
    "add_learned_positions",
    "add_learned_positions",
    "Exercise 3: learned positions, with an offset",
    3,
    (
        Check("equals x + table[offset : offset + N]", _learned_cases, _judge_learned),
        unseen_check("the same on unseen inputs", _random_learned, _judge_learned),
        Check(
            "a ValueError for positions beyond the table",
            unseen(_too_long_cases),
            _judge_too_long,
            PROPERTY,
        ),
        Check(
            "a later chunk, with its offset, matches the whole sequence",
            _chunk_cases,
            _judge_chunk,
            PROPERTY,
        ),
    ),
)

# --- Exercise 4: RoPE scores depend on the distance only -------------------------------


def _reference_scores(
    q, k, positions_q, positions_k, turn_q=True, turn_k=True, **mistake
):
    """(N_q, N_k) scores of q turned by positions_q and k by positions_k, float64;
    the mistakes by their flags (see :func:`_rotate`)."""
    qr = _rotate(q, positions_q, **mistake) if turn_q else q.double()
    kr = _rotate(k, positions_k, **mistake) if turn_k else k.double()
    return qr @ kr.T  # (N_q, N_k)


def _scores_cases():
    return [
        (
            seeded_randn(3, 4, seed=30),
            seeded_randn(5, 4, seed=31),
            torch.tensor([0, 2, 7]),
            torch.arange(5),
        ),
        (
            seeded_randn(4, 8, seed=32),
            seeded_randn(2, 8, seed=33),
            torch.tensor([10, 3, 3, 25]),
            torch.tensor([4, 30]),
        ),
        (
            seeded_randn(2, 6, seed=34, dtype=torch.float64),
            seeded_randn(3, 6, seed=35, dtype=torch.float64),
            torch.tensor([1, 40]),
            torch.tensor([0, 41, 2]),
        ),
    ]


def _judge_scores(cases, outcomes):
    for (q, k, pq, pk), got in each_value(cases, outcomes):
        if not _close(got, _reference_scores(q, k, pq, pk)):
            _explain_scores(q, k, pq, pk, got)


def _explain_scores(q, k, pq, pk, got):
    """Raise :class:`Failed` with the hint of the mistake that gives ``got``."""
    want = _reference_scores(q, k, pq, pk)
    shape = (q.shape[0], k.shape[0])
    if tuple(got.shape) != shape:
        if tuple(got.shape) == shape[::-1]:
            raise Failed(
                f"One row per query, one column per key: (N_q, N_k) = {shape}, "
                f"got {shape[::-1]}."
            )
        raise Failed(f"The scores are (N_q, N_k) = {shape}, got {tuple(got.shape)}.")

    def scores(**mistake):
        return _close(got, _reference_scores(q, k, pq, pk, **mistake))

    if scores(turn_q=False, turn_k=False):
        raise Failed(
            "Turn the queries and the keys before the dot product: q̃_n = R_n q_n, "
            "k̃_n′ = R_n′ k_n′. Without the rotation the scores ignore the positions."
        )
    if scores(turn_q=False) or scores(turn_k=False):
        raise Failed(
            "Turn both: the queries by their positions and the keys by theirs. "
            "With only one turned, the scores depend on absolute positions."
        )
    if scores(sign=-1):
        raise Failed(
            "The direction is the wrong way round (turned by −θ, or the two lists "
            "of positions swapped): query a at positions_q[a] is turned by "
            "+positions_q[a]·ω_i, key b by +positions_k[b]·ω_i."
        )
    if scores(layout="halves"):
        raise Failed(
            "Pair neighbouring features, (x_2i, x_2i+1), as in exercise 2, not "
            "feature i with feature i + d/2."
        )
    if scores(exponent="one"):
        raise Failed(
            "Each pair i turns at its own frequency ω_i = 10000^(−2i/d), not by "
            "the same angle for every pair."
        )
    if scores(exponent="k"):
        raise Failed(
            "The exponent is 2i/d, with i the pair index: ω_i = 10000^(−2i/d)."
        )
    if _close(got * q.shape[-1] ** 0.5, want):
        raise Failed(
            "Return the plain dot products q̃_n · k̃_n′, without the 1/√d of attention."
        )
    raise Failed(
        "scores[a, b] = (R(positions_q[a]) q[a]) · (R(positions_k[b]) k[b]), each "
        "pair (2i, 2i+1) turned by position·10000^(−2i/d), as in exercise 2."
    )


def _random_scores(g):
    cases = []
    for dtype in (torch.float32, torch.float64):
        n_q, n_k = (int(t) for t in torch.randint(1, 8, (2,), generator=g))
        d = 2 * int(torch.randint(1, 9, (), generator=g))
        q = torch.randn(n_q, d, generator=g, dtype=dtype)
        k = torch.randn(n_k, d, generator=g, dtype=dtype)
        pq = torch.randint(0, 100, (n_q,), generator=g)
        pk = torch.randint(0, 100, (n_k,), generator=g)
        cases.append((q, k, pq, pk))
    return cases


def _relative_cases():
    q, k = seeded_randn(4, 8, seed=36), seeded_randn(3, 8, seed=37)
    pq, pk = torch.tensor([0, 5, 9, 2]), torch.tensor([1, 7, 3])
    return [(q, k, pq, pk), (q, k, pq + 13, pk + 13), (q, k, pq + 40, pk + 40)]


def _judge_relative(cases, outcomes):
    values = returned_values(outcomes)
    shape = (cases[0][0].shape[0], cases[0][1].shape[0])
    if any(tuple(v.shape) != shape for v in values):
        raise Failed(f"The scores are (N_q, N_k) = {shape}.")
    if not all(_close(v, values[0]) for v in values[1:]):
        raise Failed(
            "Adding the same number to every position, queries' and keys', must not "
            "change the scores: they depend on the distance n − n′ only (eq. 5.6). "
            "Turn queries and keys by their positions, the same way."
        )


def _same_position_cases():
    q, k = seeded_randn(3, 6, seed=38), seeded_randn(4, 6, seed=39)
    return [(q, k, torch.full((3,), 8), torch.full((4,), 8))]


def _judge_same_position(cases, outcomes):
    for (q, k, _, _), got in each_value(cases, outcomes):
        if not _close(got, q.double() @ k.double().T):
            raise Failed(
                "A query and a key at the same position are turned by the same "
                "rotation, which cancels: their score is the plain q · k."
            )


RELATIVE = Exercise(
    "relative_scores",
    "relative_scores",
    "Exercise 4: RoPE scores depend on the distance only",
    4,
    (
        Check("equals the rotated q · k, any positions", _scores_cases, _judge_scores),
        unseen_check("the same on unseen inputs", _random_scores, _judge_scores),
        Check(
            "shifting every position leaves the scores unchanged",
            _relative_cases,
            _judge_relative,
            PROPERTY,
        ),
        Check(
            "at the same position, the score is q · k",
            _same_position_cases,
            _judge_same_position,
            PROPERTY,
        ),
    ),
)

# --- Exercise 5: the ALiBi bias ------------------------------------------------------


def _alibi(H, N, *, first=1, eight=8, sign=-1, absolute=True):
    """(H, N, N) bias, float64; the mistakes by their flags."""
    h = torch.arange(first, first + H, dtype=torch.float64)
    slopes = 2.0 ** (-eight * h / H)  # (H,)
    n = torch.arange(N, dtype=torch.float64)
    distance = n[:, None] - n[None, :]  # (N, N): i − j
    if absolute:
        distance = distance.abs()
    return sign * slopes[:, None, None] * distance


def _alibi_cases():
    return [(1, 3), (2, 4), (8, 5), (4, 1)]


def _heads_alike(case, got):
    H = case[0]
    return H > 1 and all(_close(got[0], got[h]) for h in range(1, H))


ALIBI_TABLE = Table(
    reference=lambda H, N: alibi_bias(N, H, dtype=torch.float64),
    equal=_close,
    row_equal=_close,
    case_by_case=True,
    rows=(
        WrongShape(
            lambda case, got, want: (
                f"One (N, N) bias per head, heads first: (H, N, N) = "
                f"{(case[0], case[1], case[1])}, got {tuple(got.shape)}."
            )
        ),
        Returns(
            lambda H, N: -alibi_bias(N, H, dtype=torch.float64),
            "Subtract the penalty: bias = −s_h·|i − j|, so that distant keys lose "
            "score.",
        ),
        Returns(
            lambda H, N: _alibi(H, N, first=0),
            "Number the heads h = 1 ... H: the first slope is 2^(−8/H), not 2⁰ = 1.",
        ),
        Returns(
            lambda H, N: _alibi(H, N, eight=1),
            "The slopes are s_h = 2^(−8h/H): you left out the 8.",
        ),
        Returns(
            lambda H, N: [
                _alibi(H, N, absolute=False),
                _alibi(H, N, sign=1, absolute=False),
            ],
            "Use the distance |i − j|: keys before and after the query are "
            "penalised alike.",
        ),
        Holds(
            _heads_alike,
            "Each head has its own slope s_h = 2^(−8h/H), h = 1 ... H: the heads "
            "must differ.",
            example_of=lambda H, N: _alibi(1, N).expand(H, N, N) * 0.37,
        ),
    ),
    otherwise="bias[h − 1, i, j] = −2^(−8h/H)·|i − j| for the heads h = 1 ... H and "
    "the tokens i, j = 0 ... N − 1; compare with tc.alibi_bias(N, H).",
)


def _random_alibi(g):
    """A usual size, many heads, a long sequence: too many (H, N) to tabulate.
    H stays a power of two, where the slopes are exactly 2^(−8h/H)."""
    usual = (
        2 ** int(torch.randint(0, 5, (), generator=g)),  # H = 1 ... 16
        int(torch.randint(1, 20, (), generator=g)),
    )
    many_heads = (
        2 ** int(torch.randint(5, 10, (), generator=g)),  # H = 32 ... 512
        int(torch.randint(2, 9, (), generator=g)),
    )
    long = (  # small enough for an honest answer written with loops
        2 ** int(torch.randint(0, 2, (), generator=g)),  # H = 1, 2
        int(torch.randint(150, 301, (), generator=g)),
    )
    return [usual, many_heads, long]


def _diagonal_cases():
    return [(4, 6), (8, 3)]


def _judge_diagonal(cases, outcomes):
    for (H, N), got in each_value(cases, outcomes):
        if tuple(got.shape) != (H, N, N):
            raise Failed(f"The bias is (H, N, N) = {(H, N, N)}.")
        diagonal = got.diagonal(dim1=-2, dim2=-1)
        off_diagonal = got[:, ~torch.eye(N, dtype=torch.bool)]  # (H, N² − N)
        if not close(diagonal, torch.zeros_like(diagonal), atol=0, rtol=0) or bool(
            (off_diagonal >= 0).any()
        ):
            raise Failed(
                "A query's own position costs nothing and every other position "
                "costs something: 0 on the diagonal, negative elsewhere."
            )


def _resize_alibi(case, i, g):
    """H (another power of two, the next or the one before) or N changed."""
    H, N = case
    if i == 0:
        halved = [H // 2] if H > 1 else []
        choices = [*halved, 2 * H]
        return (choices[int(torch.randint(len(choices), (), generator=g))], N)
    return (H, resized(N, g))


ALIBI = Exercise(
    "alibi",
    "alibi",
    "Exercise 5: the ALiBi bias",
    2,
    (
        Check("equals tc.alibi_bias", _alibi_cases, ALIBI_TABLE),
        unseen_check("the same for unseen sizes", _random_alibi, ALIBI_TABLE),
        Check(
            "0 on the diagonal, negative elsewhere",
            _diagonal_cases,
            _judge_diagonal,
            PROPERTY,
        ),
    ),
    twins=lambda case, g: one_size_at_a_time(case, g, _resize_alibi),
    mutable_inputs=False,  # numbers and strings only: nothing to change in place
)

EXERCISES: dict[str, Exercise] = {
    e.key: e for e in (SINUSOIDAL, ROPE, LEARNED, RELATIVE, ALIBI)
}

QUIZZES = load_quizzes("ch05")  # quizzes/ch05.toml
