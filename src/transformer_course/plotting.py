"""Figures the chapters share: the course's figure style, token axes, heatmaps.

* :func:`use_course_style` (every chapter): figure size, resolution, font sizes
  and constrained layout for the whole book. ``tc.setup()`` applies it, so each
  chapter's figures read the same in the book's content column.
* :func:`token_axis` (every chapter): an axis that counts tokens gets integer
  ticks, or one label per token.
* :func:`patch_tokens_figure` (chapters 1 and 7): an image, its patches, and the
  (N, C·p·p) matrix of patch tokens that :func:`~transformer_course.patchify`
  makes of it.
* :func:`attention_heatmap` (chapters 2 and 3): an attention matrix with token
  labels.
* :func:`confusion_matrix` and :func:`image_grid` (chapter 7): what a classifier
  confuses, and the images it gets wrong.
* :func:`show_figure` (chapter 2's widget): a figure with its own text
  alternative, for figures drawn inside a widget.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any, Literal

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from .tokens import patchify

__all__ = [
    "COURSE_STYLE",
    "attention_heatmap",
    "confusion_matrix",
    "image_grid",
    "loss_curves",
    "patch_tokens_figure",
    "show_figure",
    "token_axis",
    "use_course_style",
]

#: The course's matplotlib settings, applied by :func:`use_course_style`.
#: The book's content column is about 700-800 px wide: a 7 × 4 in figure at
#: 110 dpi is 770 × 440 px, shown at its natural size, so 10 pt text reads as
#: 10 pt. Multi-panel figures share the width; their tick labels stay at 9 pt.
COURSE_STYLE: dict[str, Any] = {
    "figure.figsize": (7.0, 4.0),  # inches
    "figure.dpi": 110,  # what the notebook and the book show
    "savefig.dpi": "figure",
    "figure.constrained_layout.use": True,  # titles, labels, colour bars never clash
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "figure.titlesize": 12,
    "image.interpolation": "nearest",  # a matrix cell is a square, not a blur
}


def use_course_style() -> None:
    """Apply :data:`COURSE_STYLE` to matplotlib (called by ``tc.setup()``).

    With constrained layout on, figures need no ``fig.tight_layout()``; calling
    it on a figure with a colour bar raises an error in matplotlib.
    """
    mpl.rcParams.update(COURSE_STYLE)
    _sharp_figures()


def _sharp_figures() -> None:
    """In a notebook, each figure as a PNG of twice its pixels, shown at its
    usual size ("retina"): on a phone the book shrinks a figure to the column,
    and a reader who opens or zooms it needs the pixels to read its labels.
    Outside IPython, nothing to do."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def show_figure(fig: Figure, alt: str) -> None:
    """Show ``fig`` as an image that carries ``alt``, its text alternative, then
    close it.

    For figures drawn inside a widget (``ipywidgets.interact``, chapter 2): the
    book gives a cell's figures the alt text of the cell's ``mystnb.image.alt``
    metadata, which does not reach an image inside a widget's output. A PNG of
    twice the figure's pixels, shown at its size, as ``use_course_style`` does.
    """
    from IPython.display import HTML, display

    if len(alt.split()) < 5:
        raise ValueError(
            f"alt: expected a sentence that describes the figure, got {alt!r}"
        )
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=2 * fig.dpi)
    plt.close(fig)
    width = round(fig.get_figwidth() * fig.dpi)  # CSS pixels
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    display(
        HTML(
            f'<img src="data:image/png;base64,{data}" width="{width}" '
            f'alt="{html.escape(alt)}">'
        )
    )


def token_axis(
    ax: Axes,
    labels: Sequence[Any] | None = None,
    *,
    axis: Literal["x", "y"] = "x",
    label: str | None = "token n",
    rotation: float = 0.0,
) -> Axes:
    """Make ``axis`` of ``ax`` count tokens: integer ticks only.

    Args:
        ax: the axes, e.g. an ``imshow`` of a (N, D) token matrix.
        labels: one label per token (strings, ids): a tick at each of
            0..len(labels)-1 carries its label. When ``None``, matplotlib picks
            how many ticks to show, but every one falls on an integer.
        axis: ``"x"`` or ``"y"``.
        label: the axis label (``None`` keeps the current one).
        rotation: the angle of the tick labels, in degrees.

    Returns:
        ``ax``.
    """
    if axis not in ("x", "y"):
        raise ValueError(f"axis: expected 'x' or 'y', got {axis!r}")
    which = ax.xaxis if axis == "x" else ax.yaxis
    if labels is None:
        # AutoLocator's choices (as many ticks as fit), restricted to integers
        which.set_major_locator(
            MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=True)
        )
        which.set_tick_params(rotation=rotation)
    else:
        labels = [str(t) for t in labels]
        which.set_ticks(range(len(labels)), labels, rotation=rotation)
    which.set_minor_locator(plt.NullLocator())
    if label is not None:
        which.set_label_text(label)
    return ax


def _every(n: int, at_most: int) -> range | None:
    """A label for each of n positions when they fit, else None (automatic ticks)."""
    return range(n) if n <= at_most else None


def patch_tokens_figure(
    image: torch.Tensor | np.ndarray,
    patch_size: int,
    *,
    highlight: int | None = None,
    title: str | None = None,
) -> Figure:
    """An image cut into patches, one patch flattened, and the token matrix.

    Three panels: the image with its patch grid and each patch's token number n;
    patch ``highlight`` enlarged with its pixels numbered in the order ``vec``
    flattens them (row by row); and the (N, p·p) matrix whose row n is patch n,
    the output of :func:`~transformer_course.patchify` (Turner, figure 2).

    Args:
        image: (H, W) or (1, H, W) grey image; H and W divisible by p.
        patch_size: p.
        highlight: the token to follow through the three panels (default: the
            patch with the most ink, so that it is visible).
        title: an overall title.

    Returns:
        The figure.
    """
    pixels = torch.as_tensor(image, dtype=torch.float32)
    if pixels.ndim == 3 and pixels.shape[0] == 1:
        pixels = pixels[0]
    if pixels.ndim != 2:
        raise ValueError(
            f"image: expected one grey image (H, W) or (1, H, W), got shape "
            f"{tuple(torch.as_tensor(image).shape)}"
        )
    H, W = pixels.shape
    p = patch_size
    tokens = patchify(pixels[None, None], p)[0]  # (N, p·p)
    N = tokens.shape[0]
    if highlight is None:
        highlight = int(tokens.sum(dim=1).argmax())
    if not 0 <= highlight < N:
        raise ValueError(f"highlight: expected a token in 0..{N - 1}, got {highlight}")
    rows_of_patches, cols_of_patches = H // p, W // p
    top, left = divmod(highlight, cols_of_patches)
    vmax = float(pixels.max()) or 1.0
    colour = "tab:red"

    fig, (ax_image, ax_patch, ax_tokens) = plt.subplots(
        1, 3, width_ratios=[W, 0.75 * W, max(0.45, 0.06 * p * p) * W]
    )
    ax_image.imshow(pixels.numpy(), cmap="gray_r", vmin=0, vmax=vmax)
    for k in range(1, rows_of_patches):
        ax_image.axhline(k * p - 0.5, color="tab:blue", linewidth=1)
    for k in range(1, cols_of_patches):
        ax_image.axvline(k * p - 0.5, color="tab:blue", linewidth=1)
    for n in range(N):
        r, c = divmod(n, cols_of_patches)
        ax_image.text(
            c * p - 0.4,
            r * p - 0.4,
            str(n),
            color="tab:blue",
            fontsize=7,
            ha="left",
            va="top",
            zorder=3,
            bbox={  # opaque enough to read on the darkest pixels
                "boxstyle": "round,pad=0.05",
                "fc": "white",
                "ec": "none",
                "alpha": 0.85,
            },
        )
    # the followed patch: a thick outline drawn above the grid and the labels
    ax_image.add_patch(
        Rectangle(
            (left * p - 0.5, top * p - 0.5),
            p,
            p,
            fill=False,
            color=colour,
            linewidth=4,
            zorder=4,
        )
    )
    token_axis(ax_image, _every(W, 8), label="pixel column")
    token_axis(ax_image, _every(H, 8), axis="y", label="pixel row")
    ax_image.set_title(f"{H}×{W} image, {N} patches of {p}×{p}")

    patch = tokens[highlight].reshape(p, p)  # (p, p)
    ax_patch.imshow(patch.numpy(), cmap="gray_r", vmin=0, vmax=vmax)
    for i in range(p):
        for j in range(p):
            shade = "white" if patch[i, j] > vmax / 2 else "black"
            ax_patch.text(
                j, i, str(i * p + j), ha="center", va="center", color=shade, fontsize=10
            )
    for spine in ax_patch.spines.values():
        spine.set(color=colour, linewidth=2.5)
    token_axis(ax_patch, _every(p, 8), label="column in patch")
    token_axis(ax_patch, _every(p, 8), axis="y", label="row in patch")
    ax_patch.set_title(f"patch {highlight}: vec order")

    ax_tokens.imshow(tokens.numpy(), cmap="gray_r", vmin=0, vmax=vmax, aspect="auto")
    ax_tokens.add_patch(
        Rectangle(
            (-0.5, highlight - 0.5),
            p * p,
            1,
            fill=False,
            color=colour,
            linewidth=2.5,
            clip_on=False,
        )
    )
    token_axis(ax_tokens, _every(p * p, 8), label="pixel (vec order)")
    token_axis(ax_tokens, _every(N, 16), axis="y", label="token n")
    ax_tokens.set_title(f"tokens ({N}, {p * p})")
    if title is not None:
        fig.suptitle(title)
    return fig


def _as_matrix(weights: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    matrix = np.asarray(weights, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(
            f"weights: expected a 2-D attention matrix (N_queries, N_keys), "
            f"got shape {matrix.shape}; select one batch element and head first"
        )
    return matrix


def attention_heatmap(
    weights: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str = "Attention weights",
    annotate: bool | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
) -> Axes:
    """Draw an attention matrix, queries as rows and keys as columns.

    In the course's row convention, row ``n`` of ``weights`` holds how much
    query token ``n`` takes from each key token, so each row sums to 1.

    Args:
        weights: (N_q, N_k) attention weights, a tensor or an array.
        query_labels: N_q token strings for the rows (default: their indices).
        key_labels: N_k token strings for the columns (default: the query
            labels when the matrix is square, else indices).
        ax: axes to draw into; a new figure is made when ``None``.
        title: the figure title.
        annotate: write each weight in its cell; by default only when the
            matrix is at most 12×12.
        cmap: a matplotlib colour map.
        colorbar: add a colour bar.

    Returns:
        The axes drawn into.
    """
    matrix = _as_matrix(weights)
    n_queries, n_keys = matrix.shape
    if key_labels is None and query_labels is not None and n_queries == n_keys:
        key_labels = query_labels
    query_labels = (
        [str(i) for i in range(n_queries)]
        if query_labels is None
        else list(query_labels)
    )
    key_labels = (
        [str(i) for i in range(n_keys)] if key_labels is None else list(key_labels)
    )
    if len(query_labels) != n_queries:
        raise ValueError(
            f"query_labels: expected {n_queries} labels (one per row of weights "
            f"{matrix.shape}), got {len(query_labels)}"
        )
    if len(key_labels) != n_keys:
        raise ValueError(
            f"key_labels: expected {n_keys} labels (one per column of weights "
            f"{matrix.shape}), got {len(key_labels)}"
        )
    if ax is None:
        size = min(max(3.0, 0.4 * max(n_queries, n_keys) + 1.5), 6.0)
        _, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=max(1e-12, matrix.max()))
    ax.set_xticks(range(n_keys), key_labels, rotation=90)
    ax.set_yticks(range(n_queries), query_labels)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate is None:
        annotate = max(n_queries, n_keys) <= 12
    if annotate:
        threshold = matrix.max() / 2
        for i in range(n_queries):
            for j in range(n_keys):
                colour = "black" if matrix[i, j] > threshold else "white"
                ax.text(
                    j,
                    i,
                    f"{matrix[i, j]:.2f}",
                    ha="center",
                    va="center",
                    color=colour,
                    fontsize=9,
                )
    if colorbar:
        # The bar lives inside ax's own box (an inset), not in a slot taken from
        # the figure: it then works under any layout engine, including a
        # fig.tight_layout() on a figure that started constrained.
        bar_axes = ax.inset_axes((1.04, 0.0, 0.05, 1.0))
        ax.figure.colorbar(image, cax=bar_axes)
    return ax


def loss_curves(
    histories: dict[str, Any],
    references: dict[str, float] | None = None,
    ax: Axes | None = None,
    title: str = "Training and validation loss",
    smooth: int = 1,
    held_out: str = "validation",
) -> Axes:
    """Chapters 4, 6, 7: loss against step for one or more runs of ``tc.fit``.

    Args:
        histories: run name -> a :class:`~transformer_course.train.History` (or
            anything with ``steps``, ``train_losses``, ``val_steps``,
            ``val_losses``). Training loss is drawn thin, validation loss with
            markers, in the same colour per run. Each is placed at the number
            of updates made when it was measured: step s's training loss
            (taken before its update) at s, a validation after step s at
            s + 1 (a reader saw validations "one step early", at 49 and 99).
        references: label -> loss, drawn as horizontal dashed lines named in
            the legend (e.g. the uniform ln V, unigram and bigram losses of
            chapter 6).
        smooth: the training loss is averaged over this many steps (1: raw).
        held_out: what the held-out curve is called in the legend ("test" in
            chapter 7, whose digits have no separate validation split).

    Returns the axes, with labelled axes, a legend and a title. With several
    runs the legend names each run once (its colour), then the two line
    styles, then the references, beside the axes rather than over the curves.
    """
    if not histories:
        raise ValueError("histories: expected at least one run, got none")
    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth: expected an int >= 1, got {smooth!r}")
    if ax is None:
        _, ax = plt.subplots()
    for index, (name, history) in enumerate(histories.items()):
        colour = f"C{index}"
        steps = np.asarray(history.steps, dtype=float)
        losses = np.asarray(history.train_losses, dtype=float)
        if len(steps) != len(losses):
            raise ValueError(
                f"{name}: expected as many steps as training losses, got "
                f"{len(steps)} and {len(losses)}"
            )
        if smooth > 1 and len(losses) >= smooth:
            kernel = np.ones(smooth) / smooth
            losses = np.convolve(losses, kernel, mode="valid")
            steps = steps[smooth - 1 :]
        ax.plot(steps, losses, color=colour, lw=1, alpha=0.8, label=f"{name}: train")
        if len(history.val_steps):
            # a line only through evaluations close enough to read as a curve:
            # two points far apart (before and after training) are just points;
            # dotted, since nothing was measured between them (a reader took a
            # solid segment from 0 to 60 steps for a measured gap)
            ax.plot(
                np.asarray(history.val_steps, dtype=float) + 1,  # updates made
                history.val_losses,
                color=colour,
                marker="o",
                ms=5 if len(history.val_steps) <= 2 else 4,
                lw=0 if len(history.val_steps) <= 2 else 1.2,
                ls=":",
                label=f"{name}: {held_out}",
            )
    reference_lines = [
        ax.axhline(
            value,
            color="0.4",
            ls=(0, (4, 2 + index)),
            lw=1,
            label=f"{label}: {value:.2f}",
        )
        for index, (label, value) in enumerate((references or {}).items())
    ]
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(histories) == 1:
        ax.legend(loc="best")  # where it hides the fewest points of the curves
        return ax
    # several runs: one entry per run (its colour), one per line style, then
    # the references; beside the axes, where no legend covers a curve
    runs = [
        Line2D([], [], color=f"C{index}", marker="o", ms=4, lw=1.5, label=name)
        for index, name in enumerate(histories)
    ]
    styles = [
        Line2D([], [], color="0.3", lw=1, label="train (thin line)"),
        Line2D([], [], color="0.3", lw=1.2, ls=":", marker="o", ms=4, label=held_out),
    ]
    ax.legend(
        handles=runs + styles + reference_lines,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize="small",
    )
    return ax


def confusion_matrix(
    labels: torch.Tensor,
    predicted: torch.Tensor,
    n_classes: int,
    *,
    ax: Axes | None = None,
    title: str = "Confusion matrix",
) -> torch.Tensor:
    """Chapter 7: count and draw (true class, predicted class) pairs; (classes, classes).

    Row t, column c of the returned counts: how many images of class t were
    predicted as c. The diagonal holds the right answers; the figure writes
    every count that is not 0.
    """
    labels, predicted = torch.as_tensor(labels), torch.as_tensor(predicted)
    if labels.shape != predicted.shape or labels.ndim != 1:
        raise ValueError(
            f"labels, predicted: expected two tensors of shape (B,), got "
            f"{tuple(labels.shape)} and {tuple(predicted.shape)}"
        )
    pairs = labels.long() * n_classes + predicted.long()  # (B,): one id per pair
    counts = torch.bincount(pairs, minlength=n_classes**2).reshape(n_classes, n_classes)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.6, 4.0))
    ax.imshow(counts.numpy(), cmap="Blues")
    for (true, guess), count in np.ndenumerate(counts.numpy()):
        if count:
            light = count > counts.max() / 2
            ax.text(
                guess,
                true,
                str(count),
                ha="center",
                va="center",
                fontsize=8,
                color="white" if light else "black",
            )
    ax.set(xlabel="predicted class", ylabel="true class", title=title)
    ax.set_xticks(range(n_classes))
    ax.set_yticks(range(n_classes))
    return counts


def image_grid(
    images: torch.Tensor,
    titles: Sequence[str] | None = None,
    *,
    columns: int = 8,
    title: str | None = None,
) -> Figure:
    """Chapter 7: grey images (B, 1, H, W) or (B, H, W) in a grid, one title each."""
    pixels = torch.as_tensor(images).detach().cpu()
    if pixels.ndim == 4 and pixels.shape[1] == 1:
        pixels = pixels[:, 0]
    if pixels.ndim != 3 or len(pixels) == 0:
        raise ValueError(
            f"images: expected grey images (B, 1, H, W) or (B, H, W) with B ≥ 1, "
            f"got shape {tuple(torch.as_tensor(images).shape)}"
        )
    if titles is not None and len(titles) != len(pixels):
        raise ValueError(
            f"titles: expected {len(pixels)}, one per image, got {len(titles)}"
        )
    columns = min(columns, len(pixels))
    rows = -(-len(pixels) // columns)  # ceiling
    fig, axes = plt.subplots(
        rows, columns, figsize=(0.9 * columns, 1.05 * rows), squeeze=False
    )
    for index, ax in enumerate(axes.flat):
        ax.axis("off")
        if index < len(pixels):
            ax.imshow(pixels[index].numpy(), cmap="gray_r")
            if titles is not None:
                ax.set_title(titles[index], fontsize=8)
    if title:
        fig.suptitle(title)
    return fig
