"""Schematic figures of the attention equations, drawn with matplotlib.

One function per figure. Each returns a new ``Figure`` in which every shape
carries its name and size as text (the tests read them back with
:func:`figure_text`):

* :func:`attention_as_average` (chapter 2): Turner's figure 3, ``Y = X A``.
* :func:`qkv_graph` (chapter 2): x → queries, keys, values → scores → mask →
  softmax → weights → output, with the shape of every tensor.
* :func:`multihead_as_sum` (chapter 3): Turner's figure 4,
  ``Y = Σ_h W_OV^h X A_h`` (the course's W_OV^h is what Turner writes V_h).
* :func:`split_merge_heads` (chapter 3): (B, N, D) → (B, N, H, d) →
  (B, H, N, d) and back.
* :func:`block_diagram` (chapter 4): Turner's figure 7, the pre-norm block,
  beside the original post-norm block ("Add & Normalize").

Matrices are drawn as grids of cells so that shapes can be compared by eye. The
figures set their own size and font sizes, so they read the same whatever the
figure defaults are.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

__all__ = [
    "attention_as_average",
    "block_diagram",
    "figure_text",
    "multihead_as_sum",
    "qkv_graph",
    "split_merge_heads",
]

NAME, SHAPE, SIGN = 14, 12, 20  # font sizes (points): names, shapes and notes, = ×
SCALE = 0.8  # inches per data unit (see _canvas)
HEAD_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")


def figure_text(fig: Figure) -> list[str]:
    """The texts a reader sees in ``fig``: titles, axis labels and annotations."""
    found = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        found += [ax.get_title(), *(t.get_text() for t in ax.texts)]
        if ax.axison:
            found += [ax.get_xlabel(), ax.get_ylabel()]
    return [text for text in found if text]


def _canvas(width: float, height: float, title: str) -> tuple[Figure, Axes]:
    """A figure with one frameless axes, width × height data units.

    One data unit is SCALE inches, so the text (in points) is 1/SCALE times
    larger, relative to the shapes, than on a figure drawn in inches. The
    figures stay about 8 inches wide and read at the book's width.
    """
    figsize = (width * SCALE, height * SCALE)
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    ax.set_xlim(0, width)
    ax.set_ylim(0, height - 0.5)  # the title takes the top half inch
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(title, fontsize=NAME)
    return fig, ax


def _grid(ax: Axes, x, top, rows, cols, cell, colour="white", edge="0.35"):
    """A rows × cols grid of cells, top-left corner at (x, top); returns (w, h).

    ``colour`` is one colour for every cell or a rows × cols nested list.
    """
    for i in range(rows):
        for j in range(cols):
            face = colour if isinstance(colour, str) else colour[i][j]
            corner = (x + j * cell, top - (i + 1) * cell)
            ax.add_patch(
                Rectangle(corner, cell, cell, facecolor=face, edgecolor=edge, lw=0.6)
            )
    return cols * cell, rows * cell


def _outline(ax: Axes, x, top, w, h, colour: str) -> None:
    ax.add_patch(Rectangle((x, top - h), w, h, fill=False, edgecolor=colour, lw=3))


def _label(ax: Axes, x, y, text: str, size: int = SHAPE, **kwargs) -> None:
    kwargs = {"ha": "center", "va": "center", **kwargs}
    ax.text(x, y, text, fontsize=size, **kwargs)


def _arrow(ax: Axes, start, end, text: str = "") -> None:
    """An arrow from ``start`` to ``end``, its text just above the middle."""
    ax.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=16, color="0.25", lw=1.5
        )
    )
    if text:
        middle = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.08)
        _label(ax, *middle, text, SHAPE - 1, va="bottom")


def _node(ax: Axes, x, y, name: str, shape: str, colour: str) -> None:
    """A rounded box centred at (x, y), 1.5 × 0.8 units: a name over a shape."""
    ax.add_patch(
        FancyBboxPatch(
            (x - 0.75, y - 0.4),
            1.5,
            0.8,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=colour,
            edgecolor="0.3",
        )
    )
    _label(ax, x, y + 0.13, name, NAME)
    _label(ax, x, y - 0.2, shape, SHAPE - 1)


def attention_as_average(j: int = 1, n: int = 3) -> Figure:
    """Turner's figure 3: ``Y = X A``, one output entry as a row times a column.

    ``Y[j, n]`` (Y is D × N) is row j of ``X`` (D × N: feature j of every
    token) times column n of ``A`` (N × N, each column sums to 1): a weighted
    average of feature j over the tokens. ``j`` (< 4) and ``n`` (< 6) pick the
    highlighted entry; the drawing has D = 4 and N = 6.
    """
    D, N, cell = 4, 6, 0.38
    if not (0 <= j < D and 0 <= n < N):
        raise ValueError(f"j, n: expected 0 ≤ j < {D} and 0 ≤ n < {N}, got {j}, {n}")
    A = np.random.default_rng(3).dirichlet(np.full(N, 0.6), size=N).T  # columns: 1
    shades = [[str(0.1 + 0.9 * a / A.max()) for a in row] for row in A]  # white: high
    fig, ax = _canvas(9.6, 5.1, "Attention is a weighted average: Y = X A (Turner)")
    red, blue = "#C44E52", "#4C72B0"
    top = 3.45  # of Y and X; A is taller and centred on them
    w, h = N * cell, D * cell
    x_y, x_x, x_a = 0.45, 3.55, 6.65
    top_a = top + (N - D) * cell / 2
    _grid(ax, x_y, top, D, N, cell)
    _grid(ax, x_y + n * cell, top - j * cell, 1, 1, cell, red)
    _grid(ax, x_x, top, D, N, cell, "#E6ECF5")
    _outline(ax, x_x, top - j * cell, w, cell, blue)
    _grid(ax, x_a, top_a, N, N, cell, shades)
    _outline(ax, x_a + n * cell, top_a, cell, N * cell, blue)
    for x, top_, height, name, shape in [
        (x_y, top, h, "Y", "D × N"),
        (x_x, top, h, "X", "D × N"),
        (x_a, top_a, N * cell, "A", "N × N"),
    ]:
        _label(ax, x + w / 2, top_ + 0.4, name, NAME)
        _label(ax, x + w / 2, top_ - height - 0.22, shape)
    _label(ax, x_y + w + 0.33, top - h / 2, "=", SIGN)
    _label(ax, x_x + w + 0.33, top - h / 2, "×", SIGN)
    _label(ax, x_y - 0.22, top - (j + 0.5) * cell, "j", SHAPE, color=red)
    _label(ax, x_y + (n + 0.5) * cell, top + 0.02, "n", SHAPE, color=red, va="bottom")
    notes = [
        (x_y, "output token n, feature j:\n" r"$Y_{j,n}=\sum_{n'} X_{j,n'}A_{n',n}$"),
        (x_x, "row j of X: feature j\nof all N input tokens"),
        (x_a, "column n of A: the weights\nof output n (white = high)"),
    ]
    for x, note in notes:
        _label(ax, x + w / 2, 0.5, note, va="center")
    return fig


def qkv_graph() -> Figure:
    """Single-head self-attention as a computation graph, with every shape.

    Rows convention (the code's): x (N, D); q = x W_q, k = x W_k (N, d_k) and
    v = x W_v (N, d_v); scores q kᵀ/√d_k (N, N); a mask adds −∞ where a query
    may not look; a softmax over each row gives the weights A (N, N), rows
    summing to 1; the output A v is (N, d_v).
    """
    fig, ax = _canvas(
        9.3, 4.4, "Single-head self-attention: what is computed from what"
    )
    top, middle, bottom = 3.1, 1.95, 0.8
    columns = [0.8, 2.7, 4.6, 6.5, 8.4]
    blue, orange, grey, green = "#DDE8F3", "#F6E3CF", "#ECECEC", "#DFF0DF"
    half = 0.75  # half a node's width
    _node(ax, columns[0], middle, "x", "(N, D)", blue)
    for name, y in {"q": top, "k": middle, "v": bottom}.items():
        width = "$d_v$" if name == "v" else "$d_k$"  # mathtext: a subscript
        _node(ax, columns[1], y, f"$W_{name}$", f"(D, {width})", orange)
        _node(ax, columns[2], y, f"${name}$", f"(N, {width})", grey)
        _arrow(ax, (columns[0] + half, middle), (columns[1] - half, y))
        _arrow(ax, (columns[1] + half, y), (columns[2] - half, y))
    _node(ax, columns[3], top, r"$q\,k^\top/\sqrt{d_k}$", "scores (N, N)", green)
    _node(ax, columns[4], top, "+ mask", "−∞ = blocked", green)
    _node(ax, columns[4], middle, "softmax", "of each row", green)
    _node(ax, columns[4], bottom, "A v", "output (N, $d_v$)", blue)
    _arrow(ax, (columns[2] + half, top), (columns[3] - half, top))
    _arrow(ax, (columns[2] + half, middle), (columns[3] - half, top - 0.3))
    _arrow(ax, (columns[3] + half, top), (columns[4] - half, top))
    _arrow(ax, (columns[4], top - 0.4), (columns[4], middle + 0.4))
    _arrow(ax, (columns[4], middle - 0.4), (columns[4], bottom + 0.4))
    _label(
        ax,
        columns[4] - 0.12,
        (middle + bottom) / 2,
        "weights A (N, N)",
        SHAPE - 1,
        ha="right",
    )
    _arrow(
        ax,
        (columns[2] + half, bottom),
        (columns[4] - half, bottom),
        "average the values",
    )
    return fig


def multihead_as_sum(n_heads: int = 3) -> Figure:
    """Turner's figure 4: ``Y = Σ_h W_OV^h X A_h``, with the shape of every factor.

    W_OV^h (D × D; Turner writes V_h) and A_h (N × N) are drawn as stacks of
    ``n_heads`` (at most 6); X (D × N) is shared by every head.
    """
    if not 1 <= n_heads <= len(HEAD_COLOURS):
        raise ValueError(f"n_heads: expected 1 to {len(HEAD_COLOURS)}, got {n_heads}")
    D, N, cell, step = 4, 5, 0.32, 0.13  # each head drawn up and to the right
    fig, ax = _canvas(
        9.8, 4.4, "Multi-head self-attention as a sum over heads (Turner)"
    )
    top = 2.9
    h = D * cell
    middle = top - h / 2

    def stack(x, rows, cols):
        top_ = top + (rows - D) * cell / 2
        for head in reversed(range(n_heads)):
            colour = HEAD_COLOURS[head]
            _grid(
                ax,
                x + head * step,
                top_ + head * step,
                rows,
                cols,
                cell,
                colour,
                "white",
            )
        return top_ + (n_heads - 1) * step, top_ - rows * cell

    x_y, x_m, x_x, x_a = 0.3, 3.2, 5.35, 7.55
    _grid(ax, x_y, top, D, N, cell)
    _grid(ax, x_x, top, D, N, cell, "0.85")
    m_top, m_bottom = stack(x_m, D, D)
    a_top, a_bottom = stack(x_a, N, N)
    stacked = (n_heads - 1) * step
    for x, width, top_, bottom, name, shape in [
        (x_y, N * cell, top, top - h, "Y", "D × N"),
        (x_m, D * cell + stacked, m_top, m_bottom, "$W_{OV}^h$", "D × D, one per head"),
        (x_x, N * cell, top, top - h, "X", "D × N"),
        (x_a, N * cell + stacked, a_top, a_bottom, "$A_h$", "N × N, one per head"),
    ]:
        _label(ax, x + width / 2, top_ + 0.25, name, NAME)
        _label(ax, x + width / 2, bottom - 0.22, shape)
    _label(ax, 2.2, middle, "=", SIGN)
    _label(ax, 2.7, middle, r"$\sum_{h=1}^{H}$", SIGN)
    _label(ax, 5.05, middle, "×", SIGN)
    _label(ax, 7.25, middle, "×", SIGN)
    _label(
        ax,
        4.9,
        0.5,
        "$W_{OV}^h$ (Turner's $V_h$) $= (W_v^h\\,W_O^h)^\\top$, $W_O^h$ the h-th block of $W_O$:"
        " rank ≤ d = D/H.\nHead h averages the tokens with its own $A_h$;"
        " $W_{OV}^h$ maps its D features to D features.",
    )
    return fig


def split_merge_heads(n_heads: int = 3, d_head: int = 2, n_tokens: int = 4) -> Figure:
    """How (B, N, D) becomes (B, H, N, d) and back, for one batch element.

    The D = H·d features of each token are coloured by the head that owns
    them: ``view`` cuts each row into H groups of d, ``transpose(1, 2)`` makes
    the heads a batch dimension (attention then runs on all heads at once), and
    ``merge_heads`` undoes both, before the output projection W_O mixes the
    heads (noted under the merged tokens). At most 6 heads, 4 features per head
    and 6 tokens, so that the drawing fits.
    """
    if not (1 <= n_heads <= 6 and 1 <= d_head <= 4 and 1 <= n_tokens <= 6):
        raise ValueError(
            f"expected 1 ≤ n_heads ≤ 6, 1 ≤ d_head ≤ 4, 1 ≤ n_tokens ≤ 6, got "
            f"{n_heads}, {d_head}, {n_tokens}"
        )
    H, d, N = n_heads, d_head, n_tokens
    cell, gap, between = min(0.26, 1.56 / (H * d)), 0.15, 0.15
    height = N * cell
    stack_height = H * height + (H - 1) * between
    x1 = 0.55
    x2 = x1 + H * d * cell + 1.9  # room for the arrows' labels
    x3 = x2 + H * d * cell + (H - 1) * gap + 1.9
    fig, ax = _canvas(
        x3 + d * cell + 1.0,
        max(2 * height + 3.3, stack_height + 1.9),
        "Splitting the features into heads, and merging them",
    )
    top_row = ax.get_ylim()[1] - 0.6
    bottom_row = 1.0 + height

    def tokens(x, top, spread=0.0):
        """One batch element: N rows of D features, coloured by head."""
        for head in range(H):
            _grid(
                ax,
                x + head * (d * cell + spread),
                top,
                N,
                d,
                cell,
                HEAD_COLOURS[head],
                "white",
            )
        return H * d * cell + (H - 1) * spread

    w1, w2 = tokens(x1, top_row), tokens(x2, top_row, gap)
    tokens(x1, bottom_row)
    tokens(x2, bottom_row, gap)
    _label(ax, x1 - 0.2, top_row - height / 2, "N tokens", SHAPE - 1, rotation=90)
    _label(ax, x1 + w1 / 2, top_row + 0.05, "D = H·d features", SHAPE - 1, va="bottom")
    # the heads as a batch dimension: H grids of N × d, one under the other
    stack_top = (top_row + bottom_row - height) / 2 + stack_height / 2
    for head in range(H):
        top = stack_top - head * (height + between)
        _grid(ax, x3, top, N, d, cell, HEAD_COLOURS[head], "white")
        _label(
            ax,
            x3 + d * cell + 0.1,
            top - height / 2,
            f"head {head}",
            SHAPE - 1,
            ha="left",
        )
    for x, width, top, shape in [
        (x1, w1, top_row, "(B, N, D)"),
        (x2, w2, top_row, "(B, N, H, d)"),
        (x1, w1, bottom_row, "(B, N, D)"),
        (x2, w2, bottom_row, "(B, N, H, d)"),
    ]:
        _label(ax, x + width / 2, top - height - 0.2, shape)
    _label(ax, x3 + d * cell / 2, stack_top + 0.2, "(B, H, N, d)", va="bottom")
    left, right = x1 + w1 + 0.1, x2 - 0.1
    _arrow(
        ax,
        (left, top_row - height / 2),
        (right, top_row - height / 2),
        ".view(B, N, H, d)",
    )
    _arrow(
        ax,
        (right, bottom_row - height / 2),
        (left, bottom_row - height / 2),
        ".reshape(B, N, D)",
    )
    _arrow(
        ax,
        (x2 + w2 + 0.1, top_row - height / 2),
        (x3 - 0.1, top_row - height / 2),
        ".transpose(1, 2)",
    )
    _arrow(
        ax,
        (x3 - 0.1, bottom_row - height / 2),
        (x2 + w2 + 0.1, bottom_row - height / 2),
        ".transpose(1, 2)",
    )
    _label(ax, 0.1, top_row + 0.45, "split_heads", NAME, ha="left", weight="bold")
    _label(ax, 0.1, bottom_row + 0.45, "merge_heads", NAME, ha="left", weight="bold")
    # the last step of eq. (3.1): the merged heads times W_O, which mixes them
    _label(
        ax,
        0.1,
        bottom_row - height - 0.62,
        "then · W_O (D × D, out_proj) → (B, N, D): the heads mixed",
        SHAPE - 1,
        ha="left",
        style="italic",
    )
    return fig


def _plus(ax: Axes, x, y) -> None:
    """A residual sum: a circled plus centred at (x, y), radius 0.25."""
    ax.add_patch(plt.Circle((x, y), 0.25, facecolor="white", edgecolor="0.25", lw=1.5))
    _label(ax, x, y - 0.02, "+", NAME + 2)


def _skip(ax: Axes, start, side_x, end) -> None:
    """A residual line: from ``start`` left to ``side_x``, up, then right into ``end``."""
    (x0, y0), (x1, y1) = start, end
    ax.plot([x0, side_x, side_x], [y0, y0, y1], color="0.25", lw=1.5)
    _arrow(ax, (side_x, y1), (x1 - 0.25, y1))


def block_diagram() -> Figure:
    """Chapter 4: the pre-norm block (Turner fig. 7) beside the post-norm block.

    Both have two residual lines, around multi-head self-attention (MHSA) and
    around the MLP. Pre-norm normalises each branch's input and leaves the
    residual line untouched; post-norm normalises after each sum (the original
    transformer's "Add & Normalize"). Each is repeated M times.
    """
    fig, ax = _canvas(10.0, 10.0, "The transformer block, repeated M times")
    orange, green, grey = "#F6E3CF", "#DFF0DF", "#ECECEC"
    half = 0.4  # half a node's height
    # pre-norm, main path at x = 3, residual lines at x = 1.2
    x, side = 3.0, 1.2
    _label(ax, (x + side) / 2, 9.3, "pre-norm (Turner fig. 7)", NAME)
    _label(ax, x, 0.35, "$x^{(m-1)}$  (N, D)", SHAPE)
    _node(ax, x, 1.6, "LayerNorm", "each token", grey)
    _node(ax, x, 2.9, "MHSA", "across tokens", orange)
    _plus(ax, x, 4.1)
    _node(ax, x, 5.3, "LayerNorm", "each token", grey)
    _node(ax, x, 6.6, "MLP", "each token", green)
    _plus(ax, x, 7.8)
    _label(ax, x, 8.7, "$x^{(m)}$  (N, D)", SHAPE)
    _arrow(ax, (x, 0.6), (x, 1.6 - half))
    _arrow(ax, (x, 1.6 + half), (x, 2.9 - half))
    _arrow(ax, (x, 2.9 + half), (x, 4.1 - 0.25))
    _arrow(ax, (x, 4.1 + 0.25), (x, 5.3 - half))
    _arrow(ax, (x, 5.3 + half), (x, 6.6 - half))
    _arrow(ax, (x, 6.6 + half), (x, 7.8 - 0.25))
    _arrow(ax, (x, 7.8 + 0.25), (x, 8.45))
    _skip(ax, (x, 0.9), side, (x, 4.1))
    _skip(ax, (x, 4.6), side, (x, 7.8))
    # post-norm, main path at x = 8, residual lines at x = 6.2
    x, side = 8.0, 6.2
    _label(ax, (x + side) / 2, 9.3, "post-norm (original)", NAME)
    _label(ax, x, 0.35, "$x^{(m-1)}$  (N, D)", SHAPE)
    _node(ax, x, 1.6, "MHSA", "across tokens", orange)
    _plus(ax, x, 2.8)
    _node(ax, x, 3.9, "LayerNorm", "after the sum", grey)
    _node(ax, x, 5.3, "MLP", "each token", green)
    _plus(ax, x, 6.5)
    _node(ax, x, 7.6, "LayerNorm", "after the sum", grey)
    _label(ax, x, 8.7, "$x^{(m)}$  (N, D)", SHAPE)
    _arrow(ax, (x, 0.6), (x, 1.6 - half))
    _arrow(ax, (x, 1.6 + half), (x, 2.8 - 0.25))
    _arrow(ax, (x, 2.8 + 0.25), (x, 3.9 - half))
    _arrow(ax, (x, 3.9 + half), (x, 5.3 - half))
    _arrow(ax, (x, 5.3 + half), (x, 6.5 - 0.25))
    _arrow(ax, (x, 6.5 + 0.25), (x, 7.6 - half))
    _arrow(ax, (x, 7.6 + half), (x, 8.45))
    _skip(ax, (x, 0.9), side, (x, 2.8))
    _skip(ax, (x, 4.5), side, (x, 6.5))
    return fig
