"""transformer_course.tokens (chapter 1)."""

import random

import pytest
import torch
import torch.nn.functional as F

import transformer_course as tc
from transformer_course.tokens import _merge

SAMPLES = [
    "",
    "hello world",
    "To be, or not to be: that is the question.\n",
    "naïve café — 🙂🙃 日本語 e\u0301 ß ﬁ x_y 3.14\t\n  end  ",
    "\x00\x01 control \r\n and \u200b zero width",
]


def random_strings(count=200, seed=0):
    rng = random.Random(seed)
    alphabet = "ab c\n\t.,'_9é日🙂\u0301"
    for _ in range(count):
        yield "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
    for _ in range(count):  # arbitrary code points, surrogates excluded
        yield "".join(
            chr(rng.choice([rng.randint(0, 0xD7FF), rng.randint(0xE000, 0x10FFFF)]))
            for _ in range(rng.randint(0, 12))
        )


@pytest.fixture(scope="module")
def bpe():
    return tc.BPETokenizer.train(tc.load_text()[:50_000], vocab_size=400)


# --- characters and words ----------------------------------------------------------


def test_char_tokenizer_round_trip_and_sorted_vocabulary():
    tok = tc.CharTokenizer("hello world")
    assert tok.chars == sorted(set("hello world"))
    assert tok.vocab_size == 8
    assert tok.decode(tok.encode("low door")) == "low door"
    assert tok.encode("hello") == [3, 2, 4, 4, 5]


def test_char_tokenizer_errors_name_the_problem():
    tok = tc.CharTokenizer("abc")
    with pytest.raises(
        ValueError, match=r"1 character\(s\) outside the vocabulary of 3: 'z'"
    ):
        tok.encode("abz")
    with pytest.raises(ValueError, match=r"expected values in 0..2, got \[3\]"):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match="expected a non-empty str"):
        tc.CharTokenizer("")


def test_word_tokenizer_has_unknown_words_and_loses_spacing():
    tok = tc.WordTokenizer("the cat sat on the mat. the end", vocab_size=4)
    assert tok.words == ["<unk>", "the", ".", "cat"]
    assert tok.encode("the dog sat") == [1, 0, 0]
    assert tok.decode(tok.encode("the  cat.")) == "the cat ."
    assert tc.WordTokenizer.split("don't stop, o'er") == ["don't", "stop", ",", "o'er"]
    with pytest.raises(ValueError, match=r"expected values in 0..3, got \[4\]"):
        tok.decode([1, 4])


# --- BPE -------------------------------------------------------------------------


def test_pretokenize_covers_every_character():
    for text in [*SAMPLES, *random_strings()]:
        assert "".join(tc.pretokenize(text)) == text


def test_merges_on_a_small_example_checked_by_hand():
    # chunks: "aaab" x1, " aaab" x1 ... use one word so the counts are easy to follow
    bpe = tc.BPETokenizer.train("aaabdaaabac", vocab_size=259)
    a, b, c, d = (ord(x) for x in "abcd")
    # 1st: pairs aa:4, ab:2, ba:1, bd:1, da:1, ac:1 -> (a, a) = 256 : "Z a b d Z a b a c"
    #   in "aaab", (a, a) merges left to right: Z a b
    # 2nd: pairs Za:2, ab:2, ... -> (256, a), seen first = 257 : "Y b d Y b a c"
    # 3rd: (257, b): Yb:2 -> 258
    assert bpe.merges == [(a, a), (256, a), (257, b)]
    assert bpe.vocab[258] == b"aaab"
    assert bpe.encode("aaabdaaabac") == [258, d, 258, a, c]


def test_merge_helper_is_left_to_right_and_non_overlapping():
    assert _merge([1, 1, 1], (1, 1), 9) == [9, 1]
    assert _merge([1, 2, 3, 1, 2], (1, 2), 4) == [4, 3, 4]


def test_round_trip_on_arbitrary_unicode(bpe):
    for text in [*SAMPLES, *random_strings()]:
        assert bpe.decode(bpe.encode(text)) == text


def test_bpe_compresses_and_learns_the_requested_vocabulary(bpe):
    text = tc.load_text()[:50_000]
    assert bpe.vocab_size == 400
    assert len(bpe.merges) == 144
    assert len(bpe.encode(text)) < 0.6 * len(text.encode("utf-8"))
    # each merged token is the concatenation of its pair
    for k, (x, y) in enumerate(bpe.merges):
        assert bpe.vocab[256 + k] == bpe.vocab[x] + bpe.vocab[y]


def test_bpe_stops_when_nothing_is_left_to_merge():
    bpe = tc.BPETokenizer.train("ab ab", vocab_size=1000)
    assert bpe.vocab_size < 1000
    assert bpe.encode("ab ab") == [bpe.vocab.index(b"ab"), bpe.vocab.index(b" ab")]


def test_bpe_errors():
    with pytest.raises(ValueError, match="vocab_size: expected an int >= 256"):
        tc.BPETokenizer.train("abc", 100)
    bpe = tc.BPETokenizer([])
    with pytest.raises(ValueError, match=r"expected values in 0..255, got \[256\]"):
        bpe.decode([256])
    with pytest.raises(TypeError, match="expected a str, got bytes"):
        bpe.encode(b"abc")


def test_partial_utf8_decodes_to_replacement_character():
    bpe = tc.BPETokenizer([])
    ids = bpe.encode("é")  # two bytes
    assert bpe.decode(ids[:1]) == "\ufffd"


# --- patches and embeddings --------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "p"),
    [((2, 1, 8, 8), 2), ((1, 3, 6, 4), 2), ((3, 2, 12, 8), 4), ((1, 1, 5, 5), 5)],
)
def test_patchify_matches_unfold_and_inverts(shape, p):
    images = torch.randn(shape, dtype=torch.float64)
    patches = tc.patchify(images, p)
    reference = F.unfold(images, kernel_size=p, stride=p).transpose(
        1, 2
    )  # (B, N, C*p*p)
    torch.testing.assert_close(patches, reference)
    torch.testing.assert_close(tc.unpatchify(patches, shape[2:], p), images)


def test_patch_embedding_equals_a_strided_convolution():
    images = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    conv = torch.nn.Conv2d(3, 5, kernel_size=4, stride=4, bias=False).double()
    tokens = tc.patchify(images, 4) @ conv.weight.reshape(5, -1).T  # (B, N, 5)
    expected = conv(images).flatten(2).transpose(1, 2)  # (B, N, 5)
    torch.testing.assert_close(tokens, expected)


def test_patchify_gradients_match_unfold():
    images = torch.randn(1, 2, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: tc.patchify(x, 2), (images,))


def test_patch_errors_name_the_sizes():
    with pytest.raises(ValueError, match=r"size 8×6 is not divisible by patch_size 4"):
        tc.patchify(torch.zeros(1, 1, 8, 6), 4)
    with pytest.raises(
        tc.ShapeError, match=r"images: expected shape \(B, C, H, W\), got \(8, 8\)"
    ):
        tc.patchify(torch.zeros(8, 8), 2)
    with pytest.raises(ValueError, match="patch_size: expected a positive int, got 0"):
        tc.patchify(torch.zeros(1, 1, 8, 8), 0)
    with pytest.raises(
        tc.ShapeError, match=r"patches: expected shape \(B, N, P\) with N=16"
    ):
        tc.unpatchify(torch.zeros(1, 15, 4), (8, 8), 2)
    with pytest.raises(ValueError, match="must be C·p·p"):
        tc.unpatchify(torch.zeros(1, 16, 5), (8, 8), 2)


def test_one_hot_lookup_equals_embedding_values_and_gradients():
    table = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([[0, 6, 6], [2, 1, 0]])
    ours = tc.one_hot_lookup(ids, table)
    reference = F.embedding(ids, table)
    torch.testing.assert_close(ours, reference)
    upstream = torch.randn_like(ours)
    torch.testing.assert_close(
        torch.autograd.grad(ours, table, upstream)[0],
        torch.autograd.grad(reference, table, upstream)[0],
    )


def test_one_hot_lookup_errors():
    with pytest.raises(ValueError, match=r"ids: expected values in 0..6, got 0..7"):
        tc.one_hot_lookup(torch.tensor([0, 7]), torch.zeros(7, 2))
    with pytest.raises(TypeError, match="expected an integer tensor"):
        tc.one_hot_lookup(torch.tensor([0.0]), torch.zeros(7, 2))


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        ([104, -1], ValueError, r"ids: expected values in 0..259, got \[-1\]"),
        (
            [104, 260, 999],
            ValueError,
            r"ids: expected values in 0..259, got \[260, 999\]",
        ),
        (torch.tensor([-2, 5]), ValueError, r"expected values in 0..259, got \[-2\]"),
        ([1.0, 2.0], TypeError, r"ids: expected ints, got 1.0"),
        (torch.tensor([1.0]), TypeError, r"ids: expected ints, got tensor\(\[?1\."),
        ("abc", TypeError, r"ids: expected an iterable of ints, got str"),
        (7, TypeError, r"ids: expected an iterable of ints, got int"),
    ],
)
@pytest.mark.parametrize("method", ["token_strings", "decode"])
def test_bad_ids_are_rejected_not_wrapped_around(ids, error, message, method):
    small = tc.BPETokenizer.train("to be or not to be " * 4, vocab_size=260)
    with pytest.raises(error, match=message):
        getattr(small, method)(ids)


def test_token_strings_take_lists_and_tensors():
    small = tc.BPETokenizer.train("to be or not to be " * 4, vocab_size=260)
    ids = small.encode("To be")
    assert small.vocab_size == 260
    assert "".join(small.token_strings(ids)) == "To be"
    assert small.token_strings(torch.tensor(ids)) == small.token_strings(ids)


def test_one_hot_lookup_wants_a_tensor():
    with pytest.raises(
        TypeError, match=r"ids: expected an integer torch.Tensor .*list"
    ):
        tc.one_hot_lookup([0, 1], torch.zeros(7, 2))
