"""transformer_course.data: the shipped corpus, its checksum, and the digits."""

import hashlib
import lzma
import math
from importlib import resources

import pytest
import torch

import transformer_course as tc
from transformer_course import data

# Pinned here as well as in the package: changing the shipped text needs both.
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SIZE = 1_115_394


SHIPPED = resources.files("transformer_course") / "corpus" / "tinyshakespeare.txt.xz"


def shipped_bytes():
    return SHIPPED.read_bytes()


@pytest.fixture
def corpus_dir(tmp_path, monkeypatch):
    """An empty folder that load_text reads the corpus from, with a cold cache."""
    data._load.cache_clear()
    monkeypatch.setattr(data, "CORPUS_DIR", tmp_path)
    yield tmp_path
    data._load.cache_clear()  # never leave a tampered text in the cache


def write_xz(folder, text_bytes):
    (folder / data.TINYSHAKESPEARE.filename).write_bytes(lzma.compress(text_bytes))


def test_shipped_file_is_small_and_is_tiny_shakespeare():
    compressed = shipped_bytes()
    assert len(compressed) < 500_000
    text = lzma.decompress(compressed)
    assert len(text) == SIZE
    assert hashlib.sha256(text).hexdigest() == SHA256
    assert data.TINYSHAKESPEARE.sha256 == SHA256
    assert data.TINYSHAKESPEARE.size == SIZE


def test_load_text_returns_the_whole_corpus():
    text = tc.load_text("tinyshakespeare")
    assert len(text) == SIZE  # ASCII: one character per byte
    assert text.startswith("First Citizen:\nBefore we proceed any further, hear me")
    assert text.endswith("Whiles thou art waking.\n")
    assert len(set(text)) == 65  # the character vocabulary of chapter 1
    assert tc.load_text() == text  # the default name


def test_load_text_decompresses_once_and_then_serves_from_memory(monkeypatch):
    calls = []
    real = data.read_shipped_text

    def counting(path, spec):
        calls.append(spec.name)
        return real(path, spec)

    monkeypatch.setattr(data, "read_shipped_text", counting)
    data._load.cache_clear()
    try:
        first = tc.load_text()
        assert tc.load_text() is first
        assert tc.load_text("tinyshakespeare") is first
        assert calls == ["tinyshakespeare"]
    finally:
        data._load.cache_clear()  # the next test gets the real, uncounted reader


def test_altered_text_raises_naming_both_digests(corpus_dir):
    text = lzma.decompress(shipped_bytes())
    altered = text.replace(b"First Citizen", b"First Citizem", 1)
    assert len(altered) == len(text)  # same size: only the checksum can tell
    write_xz(corpus_dir, altered)
    with pytest.raises(data.ChecksumError) as info:
        tc.load_text()
    message = str(info.value)
    assert f"expected sha256 {SHA256}" in message
    assert f"got {hashlib.sha256(altered).hexdigest()}" in message
    assert "reinstall transformer-course" in message


def test_truncated_text_raises_naming_both_sizes(corpus_dir):
    half = lzma.decompress(shipped_bytes())[: SIZE // 2]
    write_xz(corpus_dir, half)
    with pytest.raises(
        data.ChecksumError,
        match=r"\(1,115,394 bytes\), got [0-9a-f]{64} \(557,697 bytes\)",
    ):
        tc.load_text()


def test_corrupt_compressed_file_raises(corpus_dir):
    damaged = bytearray(shipped_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # one flipped byte in the middle
    (corpus_dir / data.TINYSHAKESPEARE.filename).write_bytes(bytes(damaged))
    with pytest.raises(
        data.DataError, match=r"tinyshakespeare: cannot read the shipped file"
    ):
        tc.load_text()


def test_missing_file_raises(corpus_dir):
    with pytest.raises(
        data.DataError, match=r"cannot read the shipped file .*tinyshakespeare\.txt\.xz"
    ):
        tc.load_text()


def test_a_correct_copy_elsewhere_loads(corpus_dir):
    (corpus_dir / data.TINYSHAKESPEARE.filename).write_bytes(shipped_bytes())
    assert hashlib.sha256(tc.load_text().encode()).hexdigest() == SHA256


def test_unknown_dataset_names_the_choices():
    with pytest.raises(
        ValueError, match=r"expected one of \['tinyshakespeare'\], got 'shakespeare'"
    ):
        tc.load_text("shakespeare")


def test_digits_shapes_types_and_range():
    digits = tc.load_digits()
    assert digits.x_train.shape == (1437, 1, 8, 8)
    assert digits.x_test.shape == (360, 1, 8, 8)
    assert digits.y_train.shape == (1437,)
    assert digits.x_train.dtype == torch.float32
    assert digits.y_train.dtype == torch.int64
    assert digits.x_train.min() >= 0.0
    assert digits.x_train.max() == 1.0
    assert set(digits.y_test.tolist()) == set(range(10))


def test_digits_split_is_fixed_and_stratified():
    first, second = tc.load_digits(), tc.load_digits()
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b)
    train = torch.bincount(first.y_train, minlength=10).double()
    test = torch.bincount(first.y_test, minlength=10).double()
    # stratified: every class has ~20% of its images in the test split
    share = test / (train + test)
    assert ((share - 0.2).abs() < 0.01).all(), share
    other = tc.load_digits(seed=1)
    assert not torch.equal(other.y_test, first.y_test)


@pytest.mark.parametrize("fraction", [10 / 1797, 1787 / 1797])
def test_digits_smallest_and_largest_fractions_keep_every_class(fraction):
    digits = tc.load_digits(test_fraction=fraction)
    assert set(digits.y_train.tolist()) == set(digits.y_test.tolist()) == set(range(10))
    assert min(len(digits.y_train), len(digits.y_test)) == 10


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1, math.nan, math.inf])
def test_digits_fraction_outside_the_unit_interval(fraction):
    with pytest.raises(
        ValueError,
        match=rf"test_fraction: expected a number in \(0, 1\), got {fraction!r}$",
    ):
        tc.load_digits(test_fraction=fraction)


@pytest.mark.parametrize(
    ("fraction", "held_out", "kept"), [(0.001, 2, "1,795"), (0.999, "1,796", 1)]
)
def test_digits_fraction_that_empties_a_class(fraction, held_out, kept):
    with pytest.raises(
        ValueError,
        match=(
            rf"test_fraction: expected a share that leaves at least 10 of the 1,797 "
            rf"images \(one per class\) in each split; got {fraction}, which holds "
            rf"out {held_out} for testing and keeps {kept} for training"
        ),
    ):
        tc.load_digits(test_fraction=fraction)


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_digits_seed_out_of_range(seed):
    with pytest.raises(
        ValueError,
        match=rf"seed: expected an integer in \[0, 2\*\*32 - 1\], got {seed}$",
    ):
        tc.load_digits(seed=seed)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"test_fraction": "0.2"},
            r"test_fraction: expected a number in \(0, 1\), got '0.2'",
        ),
        (
            {"test_fraction": True},
            r"test_fraction: expected a number in \(0, 1\), got True",
        ),
        ({"seed": 1.5}, r"seed: expected an integer in \[0, 2\*\*32 - 1\], got 1.5"),
        ({"seed": "0"}, r"seed: expected an integer in \[0, 2\*\*32 - 1\], got '0'"),
    ],
)
def test_digits_arguments_of_the_wrong_type(kwargs, expected):
    with pytest.raises(TypeError, match=expected):
        tc.load_digits(**kwargs)


# --- chapter 6: split_ids and window_batches ----------------------------------


@pytest.mark.parametrize(
    ("length", "val_fraction", "cut"),
    [
        (100, 0.1, 90),
        (10, 0.9, 1),
        (10, 0.3, 7),
        (7, 0.5, 3),
        (1_115_394, 0.1, 1_003_854),
    ],
)
def test_split_ids_cuts_at_the_fraction_and_keeps_the_order(length, val_fraction, cut):
    ids = torch.arange(length)
    splits = tc.split_ids(ids, val_fraction)
    assert sorted(splits) == ["train", "val"]
    assert len(splits["train"]) == cut
    torch.testing.assert_close(splits["train"], ids[:cut])
    torch.testing.assert_close(splits["val"], ids[cut:])
    assert splits["train"].data_ptr() == ids.data_ptr()  # a view, not a copy


@pytest.mark.parametrize("val_fraction", [0, 1, -0.1, 1.5, math.nan])
def test_split_ids_rejects_a_fraction_outside_the_unit_interval(val_fraction):
    with pytest.raises(
        ValueError, match=r"val_fraction: expected a number in \(0, 1\)"
    ):
        tc.split_ids(torch.arange(10), val_fraction)


@pytest.mark.parametrize(
    "ids",
    [torch.arange(12).view(3, 4), torch.rand(10), torch.ones(10, dtype=torch.bool)],
)
def test_split_ids_wants_one_dimension_of_integer_ids(ids):
    with pytest.raises(ValueError, match=r"ids: expected a 1-D tensor of integer"):
        tc.split_ids(ids)


def ramp_splits():
    """Token id = position, so that a window shows where it was taken."""
    return {"train": torch.arange(500), "val": torch.arange(1000, 1100)}


@pytest.mark.parametrize("split", ["train", "val"])
def test_windows_targets_are_the_inputs_shifted_by_one(split):
    get_batch = tc.window_batches(ramp_splits(), batch_size=16, block_size=10)
    inputs, targets = get_batch(split, 3)
    assert inputs.shape == targets.shape == (16, 10)
    assert inputs.dtype == targets.dtype == torch.int64
    torch.testing.assert_close(inputs[:, 1:], targets[:, :-1])  # one window
    starts = inputs[:, :1]
    torch.testing.assert_close(inputs, starts + torch.arange(10))  # consecutive
    torch.testing.assert_close(targets, starts + 1 + torch.arange(10))
    ids = ramp_splits()[split]
    assert torch.isin(targets, ids).all()  # from this split only


def test_windows_reach_both_ends_of_a_split():
    ids = torch.arange(12)
    get_batch = tc.window_batches({"train": ids}, batch_size=64, block_size=10)
    inputs, targets = get_batch("train", 0)
    assert inputs.min() == 0  # the first token is an input
    assert targets.max() == 11  # and the last a target
    only = tc.window_batches({"train": ids[:11]}, batch_size=2, block_size=10)
    inputs, targets = only("train", 5)  # block_size + 1 tokens: a single window
    torch.testing.assert_close(inputs, ids[:10].expand(2, -1))
    torch.testing.assert_close(targets, ids[1:11].expand(2, -1))


def test_windows_depend_on_seed_split_and_step_only():
    def batch(seed, split, step):
        return tc.window_batches(ramp_splits(), 8, 10, seed=seed)(split, step)

    first = batch(0, "train", 4)
    torch.manual_seed(123)  # the global random state plays no part
    for again in (batch(0, "train", 4), batch(0, "train", 4)):
        torch.testing.assert_close(again, first)
    for other in (batch(0, "train", 5), batch(1, "train", 4)):
        assert not torch.equal(other[0], first[0])
    steps = {tuple(batch(0, "train", step)[0][:, 0].tolist()) for step in range(20)}
    assert len(steps) == 20  # every step draws other windows


@pytest.mark.parametrize("world_size", [2, 4])
def test_ranks_shares_concatenate_to_the_single_process_batch(world_size):
    whole = tc.window_batches(ramp_splits(), 16, 10, seed=7)("train", 2)
    shares = [
        tc.window_batches(ramp_splits(), 16, 10, seed=7, rank=r, world_size=world_size)(
            "train", 2
        )
        for r in range(world_size)
    ]
    for inputs, _ in shares:
        assert inputs.shape == (16 // world_size, 10)
    torch.testing.assert_close(torch.cat([s[0] for s in shares]), whole[0])
    torch.testing.assert_close(torch.cat([s[1] for s in shares]), whole[1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"batch_size": 6, "world_size": 4},
            r"batch_size: expected a multiple of world_size = 4, got 6",
        ),
        ({"batch_size": 0}, r"batch_size: expected a positive int, got 0"),
        ({"block_size": 2.0}, r"block_size: expected a positive int, got 2\.0"),
        ({"rank": 2, "world_size": 2}, r"expected 0 ≤ rank < world_size, got 2, 2"),
        ({"rank": -1, "world_size": 2}, r"expected 0 ≤ rank < world_size, got -1, 2"),
        (
            {"rank": 0.5, "world_size": 2},
            r"expected 0 ≤ rank < world_size, got 0\.5, 2",
        ),
        ({"world_size": 0}, r"expected 0 ≤ rank < world_size, got 0, 0"),
        (
            {"block_size": 100},
            r"splits\['val'\]: expected at least block_size \+ 1 = 101 tokens, got 100",
        ),
    ],
)
def test_window_batches_rejects_bad_arguments_naming_them(kwargs, message):
    settings = {"batch_size": 8, "block_size": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        tc.window_batches(ramp_splits(), **settings)


def test_get_batch_names_the_splits_it_knows():
    get_batch = tc.window_batches(ramp_splits(), 8, 10)
    with pytest.raises(
        ValueError, match=r"split: expected one of \['train', 'val'\], got 'test'"
    ):
        get_batch("test", 0)


def test_shifted_windows_are_inputs_and_targets_one_token_apart():
    from transformer_course.data import shifted_windows

    ids = torch.arange(100, 120)
    inputs, targets = shifted_windows(ids, torch.tensor([0, 7]), 5)
    assert inputs.tolist() == [[100, 101, 102, 103, 104], [107, 108, 109, 110, 111]]
    assert targets.tolist() == [[101, 102, 103, 104, 105], [108, 109, 110, 111, 112]]
    assert inputs.dtype == targets.dtype == torch.int64
