"""Chapter 3's exercise checks: each usual mistake fails with its hint (reference solutions and
stubs: tests/test_exercise_solutions.py)."""

from transformer_course.exercises import chapter
from transformer_course.exercises.ch03 import EXERCISES

HELPERS = (
    "def split_heads(x, h):\n    B, N, D = x.shape\n    return x.view(B, N, h, D // h).transpose(1, 2)\n"
    "def merge_heads(x):\n    B, H, N, d = x.shape\n    return x.transpose(1, 2).reshape(B, N, H * d)\n"
)
MISTAKES = [
    (
        "split_heads",
        "def split_heads(x, h):\n    B, N, D = x.shape\n    return x.view(B, N, h, D // h)",
        "transpose(1, 2)",
    ),
    (
        "split_heads",
        "def split_heads(x, h):\n    B, N, D = x.shape\n    return x.reshape(B, h, N, D // h)",
        "mixes tokens across heads",
    ),
    (
        "merge_heads",
        "def merge_heads(x):\n    B, H, N, d = x.shape\n    return x.reshape(B, N, H * d)",
        "Transpose back",
    ),
    (
        "multihead_forward",
        HELPERS
        + "def multihead_forward(x, W_qkv, W_o, h):\n    q, k, v = (x @ W_qkv).chunk(3, -1)\n"
        "    q, k, v = (split_heads(t, h) for t in (q, k, v))\n"
        "    w = torch.softmax(q @ k.transpose(-2, -1) / x.shape[-1] ** 0.5, -1)\n    return merge_heads(w @ v) @ W_o",
        "d = D/H",
    ),
    (  # nn.Linear's layout for the output weights
        "multihead_forward",
        HELPERS
        + "def multihead_forward(x, W_qkv, W_o, h):\n    q, k, v = (x @ W_qkv).chunk(3, -1)\n"
        "    q, k, v = (split_heads(t, h) for t in (q, k, v))\n"
        "    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1)\n    return merge_heads(w @ v) @ W_o.T",
        "heads W_o, not W_oᵀ",
    ),
    (
        "multihead_forward",
        "def multihead_forward(x, W_qkv, W_o, h):\n    q, k, v = (x @ W_qkv).chunk(3, -1)\n"
        "    w = torch.softmax(q @ k.transpose(-2, -1) / x.shape[-1] ** 0.5, -1)\n    return w @ v @ W_o",
        "Split q, k and v into heads",
    ),
    (  # the scale forgotten
        "multihead_forward",
        HELPERS
        + "def multihead_forward(x, W_qkv, W_o, h):\n    q, k, v = (x @ W_qkv).chunk(3, -1)\n"
        "    q, k, v = (split_heads(t, h) for t in (q, k, v))\n"
        "    w = torch.softmax(q @ k.transpose(-2, -1), -1)\n    return merge_heads(w @ v) @ W_o",
        "Scale the scores by 1/√d (d = D/H",
    ),
    (  # the softmax over the queries
        "multihead_forward",
        HELPERS
        + "def multihead_forward(x, W_qkv, W_o, h):\n    q, k, v = (x @ W_qkv).chunk(3, -1)\n"
        "    q, k, v = (split_heads(t, h) for t in (q, k, v))\n"
        "    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-2)\n"
        "    return merge_heads(w @ v) @ W_o",
        "over the keys, the last dimension",
    ),
    (
        "mha_parameter_count",
        "def mha_parameter_count(D, H, bias):\n    return 4 * D * D * H + (4 * D if bias else 0)",
        "must not depend on the number of heads",
    ),
    (
        "mha_parameter_count",
        "def mha_parameter_count(D, H, bias):\n    return 4 * D * D",
        "add the biases",
    ),
    (
        "heads_from_torch",
        "def heads_from_torch(W, h):\n    D = W.shape[1]\n    return W.view(h, 3, D // h, D).transpose(0, 1)",
        "split into q, k, v first",
    ),
    (  # a learner's: transposed, as if the weight were (in, out)
        "heads_from_torch",
        "def heads_from_torch(W, h):\n    D = W.shape[1]\n    return W.T.reshape(3, h, D // h, D)",
        "without transposing it",
    ),
]


def test_chapter_three_is_registered():
    ex = chapter(3)
    assert len(ex.exercises) >= 4
    assert len(ex.quizzes) >= 4
    assert EXERCISES["multihead_forward"].forbidden == ("scaled_dot_product_attention",)
