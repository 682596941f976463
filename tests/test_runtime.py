import random
import re

import matplotlib as mpl
import numpy as np
import pytest
import torch

import transformer_course as tc
from transformer_course import plotting, runtime


@pytest.fixture(autouse=True)
def restore_rcparams():
    """tc.setup() changes matplotlib's global settings; undo that after each test."""
    with mpl.rc_context():
        yield


def draw():
    return random.random(), np.random.rand(), torch.rand(1).item()


def test_seed_everything_makes_all_generators_repeat():
    tc.seed_everything(123)
    first = draw()
    tc.seed_everything(123)
    assert draw() == first
    tc.seed_everything(124)
    assert draw() != first


def test_seed_returns_a_seeded_generator():
    a = torch.rand(3, generator=tc.seed_everything(7))
    b = torch.rand(3, generator=tc.seed_everything(7))
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("seed", [-1, 1.5, "0"])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed: expected a non-negative int"):
        tc.seed_everything(seed)


def test_pick_device_default_follows_cuda(monkeypatch):
    monkeypatch.delenv(runtime.DEVICE_ENV, raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert tc.pick_device().type == expected


def test_pick_device_env_and_argument(monkeypatch):
    monkeypatch.setenv(runtime.DEVICE_ENV, "cpu")
    assert tc.pick_device() == torch.device("cpu")
    with pytest.raises(
        ValueError, match=r"expected one of \['cpu', 'cuda', 'mps'\], got 'tpu'"
    ):
        tc.pick_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_device_is_a_clear_error():
    with pytest.raises(RuntimeError, match="'cuda' was asked for but is not available"):
        tc.pick_device("cuda")


def test_setup_sets_threads_and_seeds(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv(runtime.THREADS_ENV, "1")
    try:
        device = tc.setup(seed=3)
        assert torch.get_num_threads() == 1
        value = torch.rand(1)
        tc.setup(seed=3)
        torch.testing.assert_close(torch.rand(1), value)
        assert isinstance(device, torch.device)
    finally:
        torch.set_num_threads(before)


def test_setup_applies_the_course_figure_style():
    mpl.rcdefaults()
    assert not mpl.rcParams["figure.constrained_layout.use"]
    tc.setup(seed=0)
    for key, value in plotting.COURSE_STYLE.items():
        assert mpl.rcParams[key] == mpl.rcParams.validate[key](value), key
    assert tuple(mpl.rcParams["figure.figsize"]) == (7.0, 4.0)
    assert mpl.rcParams["figure.constrained_layout.use"]
    assert mpl.rcParams["font.size"] >= 10


def test_setup_can_leave_the_figure_style_alone():
    mpl.rcdefaults()
    tc.setup(seed=0, style=False)
    assert tuple(mpl.rcParams["figure.figsize"]) == (6.4, 4.8)  # matplotlib's own
    assert not mpl.rcParams["figure.constrained_layout.use"]


def test_show_source_shows_the_real_code():
    code = tc.show_source(tc.average_rows)
    assert "def average_rows" in code.data
    assert "A @ x" in code.data


def test_on_colab_is_false_here():
    assert tc.on_colab() is False


def test_show_source_reads_without_sphinx_markup():
    """The book showed ":meth:`…`" and "``mask``" in docstrings: shown plain."""
    from transformer_course.runtime import readable_source

    assert (
        readable_source(
            "a :func:`~.attention.softmax`, :class:`Block <transformer_course.Block>`,"
            " :meth:`fit` and ``mask``"
        )
        == "a `softmax`, `Block`, `fit` and `mask`"
    )
    for obj in (tc.MultiHeadAttention, tc.LayerNorm, tc.window_batches, tc.fit):
        shown = tc.show_source(obj).data
        assert not re.search(r":(func|class|meth|mod|data):`|``", shown), obj
        assert "def " in shown
