"""An exercise that forbids a function runs only plain tensor arithmetic
(issue 20, the thirty-first red team's fix).

Thirty red teams each found a forbidden function under one more spelling (an
order statistic, a pooling, a resampling, a stable log-add): a list of what is
forbidden can only grow. The runner now also refuses, by name, every aten
operator outside a list of what such an exercise needs
(:func:`transformer_course.exercises.runner.allowed_operators`). These tests
hold the list to both sides: the honest answers a learner writes, in many
spellings, keep full marks; operators outside it are refused by name; and a
cell cannot widen it.
"""

import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import (
    insert_after,
    needs_bwrap,
    source_path,
    submission,
    write,
)

from transformer_course.exercises import chapter, runner, widgets
from transformer_course.exercises.core import run_exercise
from transformer_course.grading.grade import grade_notebook

HONEST = {}
HONEST[(1, "embed_one_hot")] = [
    """def embed_one_hot(ids, table):
    one_hot = torch.nn.functional.one_hot(ids, num_classes=table.shape[0])
    return one_hot.to(table.dtype) @ table""",
    """def embed_one_hot(ids, table):
    V = table.shape[0]
    oh = (ids.unsqueeze(-1) == torch.arange(V)).to(table.dtype)
    return oh @ table""",
    """def embed_one_hot(ids, table):
    V, D = table.shape
    oh = torch.zeros(*ids.shape, V, dtype=table.dtype)
    oh.scatter_(-1, ids.unsqueeze(-1), 1.0)
    return torch.matmul(oh, table)""",
    """def embed_one_hot(ids, table):
    V, D = table.shape
    flat = ids.reshape(-1)
    oh = torch.zeros(flat.numel(), V, dtype=table.dtype)
    oh[torch.arange(flat.numel()), flat] = 1
    return (oh @ table).reshape(*ids.shape, D)""",
    """def embed_one_hot(ids, table):
    oh = F.one_hot(ids, table.size(0)).type_as(table)
    return torch.einsum("...v,vd->...d", oh, table)""",
    """def embed_one_hot(ids, table):
    oh = F.one_hot(ids, table.size(0)).double()
    return (oh.unsqueeze(-1) * table.double()).sum(-2).to(table.dtype)""",
    """def embed_one_hot(ids, table):
    oh = F.one_hot(ids, len(table)).float()
    return torch.tensordot(oh.to(table.dtype), table, dims=1)""",
]
HONEST[(2, "stable_softmax")] = [
    """def stable_softmax(x):
    shifted = x - x.max(dim=-1, keepdim=True).values
    exps = shifted.exp()
    return exps / exps.sum(dim=-1, keepdim=True)""",
    """def stable_softmax(x):
    m = torch.amax(x, dim=-1, keepdim=True)
    e = torch.exp(x - m)
    return e / torch.sum(e, -1, keepdim=True)""",
    """def stable_softmax(x):
    m, _ = x.max(-1)
    e = (x - m[..., None]).exp()
    return e / e.sum(-1)[..., None]""",
    """def stable_softmax(x):
    m = x.max(dim=-1, keepdim=True)[0]
    z = x - m
    log_norm = torch.log(torch.exp(z).sum(-1, keepdim=True))
    return torch.exp(z - log_norm)""",
    """def stable_softmax(x):
    m = x.max(dim=-1, keepdim=True).values
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    return e.div(e.sum(dim=-1, keepdim=True))""",
    """def stable_softmax(x):
    m = x.detach().max(-1, keepdim=True).values
    e = (x - m).exp_()
    e /= e.sum(-1, keepdim=True)
    return e""",
]
HONEST[(2, "attention")] = [
    """def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v""",
    """def attention(q, k, v):
    d = q.size(-1)
    s = torch.matmul(q, k.mT) / math.sqrt(d)
    w = F.softmax(s, dim=-1)
    return torch.matmul(w, v)""",
    """def attention(q, k, v):
    s = torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5
    w = s.softmax(-1)
    return torch.einsum("...qk,...kd->...qd", w, v)""",
    """def attention(q, k, v):
    s = q @ k.transpose(-1, -2) / torch.tensor(q.shape[-1], dtype=q.dtype).sqrt()
    s = s - s.max(-1, keepdim=True).values
    w = s.exp() / s.exp().sum(-1, keepdim=True)
    return w @ v""",
]
HONEST[(3, "multihead_forward")] = [
    """def multihead_forward(x, W_qkv, W_o, n_heads):
    q, k, v = (x @ W_qkv).chunk(3, dim=-1)
    q, k, v = (split_heads(t, n_heads) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    weights = torch.softmax(scores, dim=-1)
    return merge_heads(weights @ v) @ W_o""",
    """def multihead_forward(x, W_qkv, W_o, n_heads):
    B, N, D = x.shape
    d = D // n_heads
    qkv = (x @ W_qkv).view(B, N, 3, n_heads, d).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), -1)
    out = (w @ v).transpose(1, 2).reshape(B, N, D)
    return out @ W_o""",
    """def multihead_forward(x, W_qkv, W_o, n_heads):
    B, N, D = x.shape
    d = D // n_heads
    q, k, v = torch.split(x @ W_qkv, D, dim=-1)
    heads = []
    for h in range(n_heads):
        sl = slice(h * d, (h + 1) * d)
        s = q[..., sl] @ k[..., sl].transpose(1, 2) / d ** 0.5
        heads.append(F.softmax(s, dim=-1) @ v[..., sl])
    return torch.cat(heads, dim=-1) @ W_o""",
]
HONEST[(4, "layer_norm")] = [
    """def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta""",
    """def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mu) * torch.rsqrt(var + eps) * gamma + beta""",
    """def layer_norm(x, gamma, beta, eps=1e-5):
    var, mu = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return torch.addcmul(beta, gamma, (x - mu) / (var + eps).sqrt())""",
    """def layer_norm(x, gamma, beta, eps=1e-5):
    D = x.shape[-1]
    mu = x.sum(-1, keepdim=True) / D
    c = x - mu
    var = (c * c).sum(-1, keepdim=True) / D
    return c / (var + eps) ** 0.5 * gamma + beta""",
    """def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    sd = torch.sqrt(x.var(-1, keepdim=True, correction=0) + eps)
    return gamma * ((x - mu) / sd) + beta""",
]
HONEST[(6, "attend_with_cache")] = [
    """def attend_with_cache(q, k, v, k_cache, v_cache, length):
    N, d = q.shape[-2:]
    end = length + N
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, length:end] = k
    v_cache[:, :, length:end] = v
    keys, values = k_cache[:, :, :end], v_cache[:, :, :end]
    scores = q @ keys.transpose(-2, -1) / d**0.5
    allowed = torch.ones(N, end, dtype=torch.bool, device=q.device).tril(length)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights @ values, k_cache, v_cache""",
    """def attend_with_cache(q, k, v, k_cache, v_cache, length):
    N, d = q.shape[-2], q.shape[-1]
    keys = torch.cat([k_cache[:, :, :length], k], dim=2)
    values = torch.cat([v_cache[:, :, :length], v], dim=2)
    k_new = torch.cat([keys, k_cache[:, :, length + N:]], dim=2)
    v_new = torch.cat([values, v_cache[:, :, length + N:]], dim=2)
    s = q @ keys.transpose(-2, -1) / math.sqrt(d)
    i = torch.arange(N).unsqueeze(1) + length
    j = torch.arange(length + N).unsqueeze(0)
    s = torch.where(j <= i, s, torch.tensor(float("-inf"), dtype=s.dtype))
    return F.softmax(s, -1) @ values, k_new, v_new""",
    """def attend_with_cache(q, k, v, k_cache, v_cache, length):
    N, d = q.shape[-2:]
    end = length + N
    kc = k_cache.clone(); vc = v_cache.clone()
    kc.narrow(2, length, N).copy_(k)
    vc.narrow(2, length, N).copy_(v)
    s = q @ kc[:, :, :end].transpose(-2, -1) / d**0.5
    mask = torch.triu(torch.ones(N, end, dtype=torch.bool), diagonal=length + 1)
    s = s.masked_fill(mask, -torch.inf)
    return s.softmax(-1) @ vc[:, :, :end], kc, vc""",
]


def split_heads(x, n_heads):
    B, N, D = x.shape
    return x.view(B, N, n_heads, D // n_heads).transpose(1, 2)  # (B, H, N, d)


def merge_heads(x):
    B, H, N, d = x.shape
    return x.transpose(1, 2).reshape(B, N, H * d)  # (B, N, D)


CASES = [
    pytest.param(number, key, source, id=f"{key}-{i}")
    for (number, key), sources in HONEST.items()
    for i, source in enumerate(sources)
]


def _function(key, source):
    namespace = {
        "torch": torch,
        "F": F,
        "math": math,
        "split_heads": split_heads,
        "merge_heads": merge_heads,
    }
    exec(source, namespace)
    return namespace[key]


def _checked(number, key, source):
    """(the notebook's report on ``source`` as the answer to ``key``, the exercise)."""
    exercise = chapter(number).exercises[key]
    return run_exercise(exercise, _function(exercise.function, source)), exercise


def _graded(tmp_path, number, key, source, *cells):
    """The grader's grade of a submission whose answer to ``key`` is ``source``,
    with the learner's ``cells`` after the setup."""
    notebook = submission({key: source}, chapter=number)
    if cells:
        insert_after(notebook, "setup", *cells)
    path = write(tmp_path, notebook, source_path(number).name)
    (grade,) = grade_notebook(path, only=[key]).exercises
    return grade


@pytest.mark.parametrize(("number", "key", "source"), CASES)
def test_honest_spellings_keep_full_marks(number, key, source):
    report, exercise = _checked(number, key, source)
    assert report.score == pytest.approx(exercise.points), report.first_hint


@needs_bwrap
@pytest.mark.parametrize(
    ("number", "key", "index"),
    [
        (1, "embed_one_hot", 2),
        (2, "stable_softmax", 3),
        (4, "layer_norm", 2),
        (6, "attend_with_cache", 2),
    ],
)
def test_the_grader_gives_an_unusual_honest_spelling_full_marks(
    tmp_path, number, key, index
):
    grade = _graded(tmp_path, number, key, HONEST[(number, key)][index])
    assert grade.points == pytest.approx(grade.max_points), grade


OUTSIDE = {
    # the norm as a distance to zero: cdist's own kernel (it scored 4 / 4)
    "cdist": (
        4,
        "layer_norm",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    c = x - x.mean(-1, keepdim=True)\n"
        "    rows = c.reshape(-1, 1, c.shape[-1])\n"
        "    norm = torch.cdist(rows, torch.zeros_like(rows)).reshape(c.shape[:-1] + (1,))\n"
        "    return gamma * c / torch.sqrt(norm**2 / c.shape[-1] + eps) + beta\n",
    ),
    # a row picked by a sorted search of a monotone key (no operator listed)
    "searchsorted": (
        1,
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n"
        "    V = table.shape[0]\n"
        "    at = torch.searchsorted(torch.arange(V), ids)\n"
        "    one_hot = (at.unsqueeze(-1) == torch.arange(V)).to(table.dtype)\n"
        "    return one_hot @ table\n",
    ),
    "histc": (
        2,
        "stable_softmax",
        "def stable_softmax(x):\n"
        "    torch.histc(x.double(), bins=4)\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp()\n"
        "    return e / e.sum(-1, keepdim=True)\n",
    ),
}


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_an_operator_outside_the_list_is_refused_by_name(name):
    report, _ = _checked(*OUTSIDE[name])
    assert report.score == 0
    assert "plain tensor arithmetic" in report.first_hint
    assert name in report.first_hint.replace("_cdist_forward", "cdist")


def test_the_list_holds_no_forbidden_operator_and_no_row_reader_for_lookups():
    for key, (_text, _functions, operators) in runner.FORBIDDEN.items():
        allowed = runner.allowed_operators([key])
        if allowed is not None:
            # refused first anyway (softplus is pointwise); listed by hand, they
            # would read as permitted
            listed = allowed - runner._POINTWISE
            assert not listed & (operators | runner._in_place(operators)), key
    lookup = runner.allowed_operators(["embedding"])
    assert not lookup & runner._READING_OPERATORS
    assert {"kthvalue", "sort", "max_pool2d", "grid_sampler_2d", "roll"}.isdisjoint(
        lookup
    )
    assert {"exp", "add", "where", "masked_fill"} <= lookup  # torch's pointwise tag
    assert runner.allowed_operators(["transformer_layer"]) is None


def test_a_cell_that_widens_the_list_switches_the_checks_off():
    source = HONEST[(1, "embed_one_hot")][0]
    saved = runner._ALSO_ALLOWED["embedding"]
    try:
        runner._ALSO_ALLOWED["embedding"] = saved | {"kthvalue"}
        report, exercise = _checked(1, "embed_one_hot", source)
    finally:
        runner._ALSO_ALLOWED["embedding"] = saved
    assert report.score == 0
    assert "switch off" in report.first_hint
    report, _ = _checked(1, "embed_one_hot", source)
    assert report.score == pytest.approx(exercise.points)


@pytest.mark.parametrize(
    ("number", "key", "printed", "shape"),
    [
        (2, "stable_softmax", "print(x)", "print(x.shape)"),
        (1, "embed_one_hot", "print(f'{ids}')", "print(ids.shape)"),
    ],
)
def test_a_tensor_printed_to_debug_is_named_as_such(number, key, printed, shape):
    """Printing a tensor reads its numbers out of torch (as tolist would), so
    the watch refuses it; the hint says that, not "you used a softmax"."""
    honest = HONEST[(number, key)][1]
    report, exercise = _checked(
        number, key, honest.replace("\n", f"\n    {printed}\n", 1)
    )
    assert report.score == 0
    assert report.first_hint.startswith("Not checked: " + runner.PRINTED)
    assert "print its shape" in report.first_hint
    # its rows say "not checked", not "failed": no value was judged
    shown = widgets.render_report(report)
    assert 'aria-label="not checked"' in shown
    assert 'aria-label="failed"' not in shown
    assert "[----]" in widgets.report_text(report)
    assert "[FAIL]" not in widgets.report_text(report)
    said = " ".join(widgets.report_text(report).split())  # unwrapped
    assert ": not checked, none of its points." in said
    assert "0 of" not in shown
    report, _ = _checked(number, key, honest.replace("\n", f"\n    {shape}\n", 1))
    assert report.score == pytest.approx(exercise.points), report.first_hint


#: The thirty-first red team's ways to full marks with allowed operators only:
#: the table's rows written to the positions of their ids (index_put_ with a
#: tensor of values), a prefix of the table read by scatter_'s index size, and
#: floats taken out of torch for NumPy's logaddexp (a ufunc: no profile event).
RED_TEAM_31 = {
    "index_put_ of the table's rows": (
        1,
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n    V, D = table.shape\n    flat = ids.reshape(-1)\n    N = flat.numel()\n    # each id's occurrence number among equal ids (ids compared with ids, not with a vocabulary)\n    same = flat.unsqueeze(1) == flat.unsqueeze(0)\n    earlier = torch.ones(N, N, dtype=torch.bool).tril(-1)\n    rank = (same & earlier).sum(1)\n    slot = rank * V + flat                       # unique per position\n    pos = torch.zeros(N * V, dtype=torch.long)\n    pos.index_put_((slot,), torch.arange(N))     # pos[rank*V+id] = position\n    valid = torch.zeros(N * V, dtype=torch.bool)\n    valid.index_put_((slot,), torch.ones(N, dtype=torch.bool))\n    src = table.unsqueeze(0).expand(N, V, D)     # a view: no copy, no one-hot\n    vals = torch.where(valid.view(N, V, 1), src, torch.zeros((), dtype=table.dtype))\n    out = torch.zeros(N, D, dtype=table.dtype)\n    out.index_put_((pos.view(N, V),), vals, accumulate=True)   # table rows written where their ids are\n    return out.reshape(*ids.shape, D)\n",
        "F.embedding, nn.Embedding or indexing (",
    ),
    "scatter_ reading a prefix": (
        1,
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n    V, D = table.shape\n    flat = ids.reshape(-1)\n    N = flat.numel()\n    here = torch.arange(N)\n    rows = []\n    for i in range(N):\n        k = int((flat * (here == i)).sum())          # the i-th id, as a number\n        # scatter reads only as many rows of src as its index has: rows 0..k,\n        # all written to row 0 of a one-row tensor, in order: row k is written last\n        index = torch.zeros(k + 1, D, dtype=torch.long)\n        rows.append(torch.zeros(1, D, dtype=table.dtype).scatter_(0, index, table))\n    return torch.cat(rows).reshape(*ids.shape, D)\n",
        "taken out of torch",
    ),
    "np.logaddexp on floats": (
        2,
        "stable_softmax",
        "import numpy as np\n\ndef stable_softmax(x):\n    n = x.shape[-1]\n    out = []\n    for row in x.reshape(-1, n):\n        a = np.array([float(v) for v in row])\n        lse = a[0]\n        for b in a[1:]:\n            lse = np.logaddexp(lse, b)   # a ufunc called directly: no c_call event\n        out.append([float(p) for p in np.exp(a - lse)])\n    return torch.tensor(out, dtype=x.dtype).reshape(x.shape)\n",
        "taken out of torch",
    ),
}

#: Honest spellings the thirty-first red team found refused, now passing.
HONEST_31 = {
    "stacked boolean columns": (
        1,
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n    oh = torch.stack([(ids == v) for v in range(table.shape[0])], dim=-1)\n    return oh.to(table.dtype) @ table",
    ),
    "repeat of the vocabulary": (
        1,
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n    V = table.shape[0]\n    one_hot = (torch.arange(V).repeat(*ids.shape, 1) == ids.unsqueeze(-1)).to(table.dtype)\n    return one_hot @ table",
    ),
    "the maximum by topk": (
        2,
        "stable_softmax",
        "def stable_softmax(x):\n    m = x.topk(1, dim=-1).values\n    e = (x - m).exp()\n    return e / e.sum(-1, keepdim=True)",
    ),
    "logsumexp in attention": (
        2,
        "attention",
        "def attention(q, k, v):\n    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n    w = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))\n    return w @ v",
    ),
}


@pytest.mark.parametrize("name", sorted(RED_TEAM_31))
def test_the_thirty_first_red_teams_lookups_and_log_adds_earn_nothing(name):
    number, key, source, said = RED_TEAM_31[name]
    report, _ = _checked(number, key, source)
    assert report.score == 0
    assert said in report.first_hint


@pytest.mark.parametrize("name", sorted(HONEST_31))
def test_honest_spellings_the_thirty_first_red_team_found_refused_pass(name):
    report, exercise = _checked(*HONEST_31[name])
    assert report.score == pytest.approx(exercise.points), report.first_hint


#: Numbers out of torch in any form: an int, a bit (bool, an assert, torch.equal)
#: or a shape (x[mask]) carries them to NumPy's ufuncs, which no hook sees. So
#: where an allowlist holds none leaves (but an id in the lookup); the hint says
#: to keep them in tensors. An honest assert of allclose is refused too.
LEAKS = {
    "an int of scaled floats": (
        "def stable_softmax(x):\n"
        "    import numpy as np\n"
        "    q = (x * 2**30).round().to(torch.int64).reshape(-1)\n"
        "    a = np.array([int(v) for v in q]) / 2**30\n"
        "    return x - x  # what follows would use np.logaddexp on a\n"
    ),
    "a bit from an if": (
        "def stable_softmax(x):\n"
        "    if (x > 0).any():\n"
        "        pass\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp()\n"
        "    return e / e.sum(-1, keepdim=True)\n"
    ),
    "an assert of allclose": (
        "def stable_softmax(x):\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp()\n"
        "    out = e / e.sum(-1, keepdim=True)\n"
        "    assert torch.allclose(out.sum(-1), torch.ones_like(out.sum(-1)))\n"
        "    return out\n"
    ),
    "a shape from a mask": (
        "def stable_softmax(x):\n"
        "    count = x[x > 0].shape[0]\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp()\n"
        "    return e / e.sum(-1, keepdim=True)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(LEAKS))
def test_no_number_leaves_torch_where_an_allowlist_holds(name):
    report, _ = _checked(2, "stable_softmax", LEAKS[name])
    assert report.score == 0
    assert "taken out of torch" in report.first_hint
    assert "torch.where instead of an if" in report.first_hint


def test_ids_may_leave_torch_in_the_lookup_but_the_tables_numbers_not():
    looped = (
        "def embed_one_hot(ids, table):\n"
        "    V = table.shape[0]\n"
        "    rows = [(torch.arange(V) == int(i)).to(table.dtype) @ table\n"
        "            for i in ids.reshape(-1)]\n"
        "    return torch.stack(rows).reshape(*ids.shape, -1)\n"
    )
    # iterating over the ids selects: refused as a lookup, not as a leak
    report, exercise = _checked(1, "embed_one_hot", looped)
    assert report.score == 0
    one_hot = HONEST[(1, "embed_one_hot")][0]  # F.one_hot reads its ids' range
    report, _ = _checked(1, "embed_one_hot", one_hot)
    assert report.score == pytest.approx(exercise.points)
    floats = one_hot.replace("    return", "    float(table.sum())\n    return", 1)
    report, _ = _checked(1, "embed_one_hot", floats)
    assert report.score == 0
    assert "taken out of torch" in report.first_hint


#: The thirty-second red team's ways past pass 31's fix: a float's bits read as
#: an int, or as a length (a shape, no scalar read at all), then NumPy or SciPy
#: computing what is forbidden; the table taken out and looked up in NumPy; a
#: tril/triu band at an id's diagonal. Every one takes a number out of torch.
RED_TEAM_32 = {
    "float bits as ints, then np.logaddexp": (
        2,
        "stable_softmax",
        'import numpy as np\nimport torch\n\ndef stable_softmax(x):\n    """x (..., N) -> (..., N)."""\n    flat = x.detach().to(torch.float64).contiguous().reshape(-1).view(torch.int64)\n    bits = [int(flat[k]) for k in range(flat.shape[0])]   # int _local_scalar_dense: allowed\n    vals = np.array(bits, dtype=np.int64).view(np.float64).reshape(tuple(x.shape))\n    # the forbidden stable log-sum-exp, by NumPy\'s ufunc (no hook sees a ufunc call)\n    lse = np.full(vals.shape[:-1], -np.inf)\n    for j in range(vals.shape[-1]):\n        lse = np.logaddexp(lse, vals[..., j])\n    out = np.exp(vals - lse[..., None])\n    back = [int(b) for b in out.reshape(-1).view(np.int64)]\n    return torch.tensor(back, dtype=torch.int64).view(torch.float64).reshape(x.shape).to(x.dtype)\n',
    ),
    "ints as lengths (repeat_interleave), then np.logaddexp": (
        2,
        "stable_softmax",
        'import numpy as np\nimport torch\n\ndef _out(t):\n    """an int64 tensor\'s elements to Python with no _local_scalar_dense: 16-bit pieces read as lengths"""\n    flat = t.reshape(-1)\n    vals = []\n    for k in range(flat.shape[0]):\n        v = flat[k]\n        n = 0\n        for s in range(0, 64, 16):\n            piece = ((v >> s) & 0xFFFF).reshape(1)\n            n |= torch.repeat_interleave(piece).shape[0] << s    # a length, not a scalar read\n        vals.append(n)\n    return vals\n\ndef stable_softmax(x):\n    flat = x.detach().to(torch.float64).contiguous().view(torch.int64)\n    vals = np.array(_out(flat), dtype=np.uint64).view(np.float64).reshape(tuple(x.shape))\n    lse = np.full(vals.shape[:-1], -np.inf)\n    for j in range(vals.shape[-1]):\n        lse = np.logaddexp(lse, vals[..., j])\n    out = np.exp(vals - lse[..., None])\n    back = [int(b) for b in out.reshape(-1).view(np.int64)]\n    return torch.tensor(back, dtype=torch.int64).view(torch.float64).reshape(x.shape).to(x.dtype)\n',
    ),
    "the table's bits to NumPy, looked up there": (
        1,
        "embed_one_hot",
        'import numpy as np\nimport torch\n\ndef _ints(t):\n    """every element of t (an int tensor) as Python ints, no indexing: a tril/triu band per position"""\n    row = t.reshape(1, -1)\n    return [int(torch.triu(torch.tril(row, k), k).sum()) for k in range(row.shape[1])]\n\ndef embed_one_hot(ids, table):\n    """the table taken out of torch as its bits, looked up by NumPy fancy indexing"""\n    V, D = table.shape\n    wide = table.detach().to(torch.float64).view(torch.int64)\n    np_table = np.array(_ints(wide), dtype=np.int64).view(np.float64).reshape(V, D)\n    np_ids = np.array(_ints(ids), dtype=np.int64).reshape(tuple(ids.shape))\n    rows = np_table[np_ids]                      # the lookup: NumPy indexing\n    back = torch.tensor([int(b) for b in rows.reshape(-1).view(np.int64)], dtype=torch.int64)\n    return back.view(torch.float64).reshape(*ids.shape, D).to(table.dtype)\n',
    ),
    "a tril/triu band at an id's diagonal": (
        1,
        "embed_one_hot",
        'import torch\n\ndef embed_one_hot(ids, table):\n    """ids (...,) int64, table (V, D) -> (..., D): row i read by a tril/triu band at diagonal i."""\n    V, D = table.shape\n    flat = ids.reshape(1, -1)                      # (1, N)\n    cols = table.t().reshape(D, 1, V)              # D batches of one row of V\n    rows = []\n    for n in range(flat.shape[1]):\n        i = int(torch.triu(torch.tril(flat, n), n).sum())      # ids[n], no indexing\n        rows.append(torch.triu(torch.tril(cols, i), i).sum(-1).reshape(D))  # table[i]\n    return torch.stack(rows).reshape(*ids.shape, D)\n',
    ),
    "bits to SciPy's zscore": (
        4,
        "layer_norm",
        'import numpy as np\nimport torch\nfrom scipy import stats\n\ndef _np(t):\n    flat = t.detach().to(torch.float64).contiguous().reshape(-1).view(torch.int64)\n    return np.array([int(flat[k]) for k in range(flat.shape[0])], dtype=np.int64).view(np.float64).reshape(tuple(t.shape))\n\ndef layer_norm(x, gamma, beta, eps=1e-5):\n    """x (..., D) -> (..., D), normalised by SciPy\'s zscore in NumPy (numbers out via their bits)"""\n    a = _np(x)\n    z = np.nan_to_num(stats.zscore(a, axis=-1))                 # (x - mean) / std, by SciPy\n    var = a.var(axis=-1, keepdims=True)\n    out = z * np.sqrt(var / (var + eps)) * _np(gamma) + _np(beta)\n    back = [int(b) for b in out.reshape(-1).view(np.int64)]\n    return torch.tensor(back, dtype=torch.int64).view(torch.float64).reshape(x.shape).to(x.dtype)\n',
    ),
}

#: One-hots written with a tensor of ones (the thirty-second red team found
#: them refused): a repeated constant is a constant.
ONES_WRITES = {
    "scatter_ src ones": "def embed_one_hot(ids, table):\n    flat = ids.reshape(-1, 1)\n    oh = torch.zeros(flat.shape[0], table.shape[0], dtype=table.dtype)\n    oh.scatter_(1, flat, torch.ones(flat.shape[0], 1, dtype=table.dtype))\n    return (oh @ table).reshape(*ids.shape, -1)",
    "scatter ones_like": "def embed_one_hot(ids, table):\n    idx = ids.unsqueeze(-1)\n    oh = torch.zeros(*ids.shape, table.shape[0], dtype=table.dtype).scatter(-1, idx, torch.ones_like(idx, dtype=table.dtype))\n    return oh @ table",
    "scatter_add_": "def embed_one_hot(ids, table):\n    idx = ids.unsqueeze(-1)\n    oh = torch.zeros(*ids.shape, table.shape[0], dtype=table.dtype).scatter_add_(-1, idx, torch.ones(idx.shape, dtype=table.dtype))\n    return oh @ table",
    "index_put ones(N)": "def embed_one_hot(ids, table):\n    flat = ids.reshape(-1)\n    N = flat.shape[0]\n    oh = torch.zeros(N, table.shape[0], dtype=table.dtype)\n    oh[torch.arange(N), flat] = torch.ones(N, dtype=table.dtype)\n    return (oh @ table).reshape(*ids.shape, -1)",
}


@pytest.mark.parametrize("name", sorted(RED_TEAM_32))
def test_the_thirty_second_red_teams_numbers_out_of_torch_earn_nothing(name):
    report, _ = _checked(*RED_TEAM_32[name])
    assert report.score == 0
    assert "taken out of torch" in report.first_hint


@pytest.mark.parametrize("name", sorted(ONES_WRITES))
def test_a_one_hot_written_with_a_tensor_of_ones_passes(name):
    report, exercise = _checked(1, "embed_one_hot", ONES_WRITES[name])
    assert report.score == pytest.approx(exercise.points), report.first_hint


def test_an_error_of_torchs_caught_inside_the_function_is_refused():
    """A caught error answers a yes/no question about the numbers (F.one_hot
    refuses an id past num_classes): asked often enough, it takes them out."""
    probing = (
        "def embed_one_hot(ids, table):\n"
        "    V = table.shape[0]\n"
        "    try:\n"
        "        F.one_hot(ids, 1)  # is every id below 1?\n"
        "    except RuntimeError:\n"
        "        pass\n"
        "    return F.one_hot(ids, V).to(table.dtype) @ table\n"
    )
    report, _ = _checked(1, "embed_one_hot", probing)
    assert report.score == 0
    assert "caught inside your function" in report.first_hint


#: The thirty-third red team's laundering: a number handed to one of the
#: runner's own functions left torch in the runner's frame, which the watch
#: trusted (the grader's stand-in for the hidden package formats its name; in a
#: notebook, to_plain compares its limits, a yes/no oracle).
LAUNDERING_CELL = """
box = {"H": type(getattr(tc, "not_there", None))}


def out_of_torch(t):
    flat = t.reshape(-1)
    positions = torch.arange(flat.shape[0])
    zero = torch.zeros((), dtype=t.dtype)
    found = []
    for i in range(flat.shape[0]):
        e = torch.where(positions == i, flat, zero).sum().to(t.dtype)
        try:
            box["H"](e)()  # raises ModuleNotFoundError, its message f"{e}: ..."
        except ModuleNotFoundError as err:
            text = str(err).split(": ")[0]
            found.append(float(text) if t.is_floating_point() else int(text))
    return found
"""
LAUNDERED_LOOKUP = """
def embed_one_hot(ids, table):
    V, D = table.shape
    rows = out_of_torch(table)
    out = [rows[i * D:(i + 1) * D] for i in out_of_torch(ids)]  # a Python lookup
    return torch.tensor(out, dtype=table.dtype).reshape(*ids.shape, D)
"""


@needs_bwrap
def test_numbers_laundered_through_the_runners_own_code_earn_nothing(tmp_path):
    grade = _graded(tmp_path, 1, "embed_one_hot", LAUNDERED_LOOKUP, LAUNDERING_CELL)
    assert grade.points == 0, grade
    assert "taken out of torch" in grade.hint


def test_the_runners_to_plain_is_no_oracle_in_a_notebook():
    oracle = (
        "def stable_softmax(x):\n"
        "    from transformer_course.exercises.runner import to_plain\n"
        "    try:\n"
        "        to_plain(0, {'depth': x.amax() * 0})  # bool(0 > t) in to_plain\n"
        "    except Exception:\n"
        "        pass\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp()\n"
        "    return e / e.sum(-1, keepdim=True)\n"
    )
    report, _ = _checked(2, "stable_softmax", oracle)
    assert report.score == 0
    assert report.first_hint.startswith("Not checked: ")
    assert "taken out of torch" in report.first_hint


#: The thirty-fourth red team's window: a generator in a reference cycle, whose
#: finally the cyclic collector runs at an allocation inside the watch's own
#: handler, where torch has taken the watch's modes off its stack (found by
#: timing). The collector is off while such a function runs.
#: (the red team's loop ran 5,000 steps; 2,000 still give the collector some
#: ten collections per call to close the generator in the handler's window,
#: and each step costs a pass through the watch in every case)
GC_WINDOW = 'import time\n\ndef _unwatched(job):\n    """Run job() in a generator\'s finally that the garbage collector closes\n    inside the watch\'s own handler (its modes popped)."""\n    box = {"out": None, "armed": True}\n    a = torch.ones(2)\n\n    def probe():\n        t0 = time.perf_counter()\n        for _ in range(5):\n            a + a\n        return time.perf_counter() - t0\n\n    def arm():\n        def g(cell):\n            try:\n                yield\n            finally:\n                if box["armed"]:\n                    if probe() < box["thr"]:\n                        box["armed"] = False\n                        box["out"] = job()\n                    else:\n                        arm()\n        cell = []\n        gen = g(cell)\n        next(gen)\n        cell.append(gen)\n\n    box["thr"] = min(probe() for _ in range(5)) / 4\n    arm()\n    keep, y = [], a\n    for _ in range(2000):\n        if not box["armed"]:\n            break\n        keep.append([])\n        y = y + 0\n    box["armed"] = False\n    return box["out"]\n'


GC_LOOKUP = (
    GC_WINDOW + "\n\ndef embed_one_hot(ids, table):\n"
    "    return _unwatched(lambda: table[ids].clone())\n"
)


def test_code_the_collector_runs_inside_the_watchs_handler_is_watched():
    report, _ = _checked(1, "embed_one_hot", GC_LOOKUP)
    assert report.score == 0


@needs_bwrap
def test_the_grader_watches_code_the_collector_runs(tmp_path):
    grade = _graded(tmp_path, 1, "embed_one_hot", GC_LOOKUP)
    assert grade.points == 0, grade


#: The thirty-fifth red team's window: an object's ``__index__``, called back by
#: torch inside the watch's function handler (the mode lifted), read numbers out
#: of scatter_'s error messages, an error the function mode alone recorded.
INDEX_WINDOW = 'import numpy as np\nimport torch\n\n\nclass Reader:\n    """An int-like object. torch asks for its value while parsing a size, once\n    more inside the watch\'s __torch_function__, where torch has lifted the\n    function mode: there an error caught is not seen, and scatter_\'s error\n    message names the first index out of bounds: a number out of torch."""\n\n    def __init__(self, tensors):\n        self.tensors = tensors\n        self.calls = 0\n        self.read = None\n\n    def __index__(self):\n        self.calls += 1\n        if self.calls == 3 and self.read is None:\n            self.read = [self.values(t) for t in self.tensors]\n        return 1\n\n    def values(self, t):\n        if t.is_floating_point():\n            wide = t.dtype == torch.float64\n            bits = t.reshape(-1).view(torch.int64 if wide else torch.int32).long()\n        else:\n            wide, bits = None, t.reshape(-1).long()\n        n = bits.shape[0]\n        where = torch.arange(n)\n        out = []\n        for i in range(n):\n            index = torch.where(where == i, bits + 2**40, 0)\n            try:\n                torch.zeros(1).scatter_(0, index, 1.0)\n            except RuntimeError as err:\n                out.append(int(str(err).split()[1]) - 2**40)\n        arr = np.array(out, dtype=np.int64)\n        if wide is None:\n            return arr.reshape(tuple(t.shape))\n        arr = arr.astype(np.int64 if wide else np.int32)\n        return arr.view(np.float64 if wide else np.float32).reshape(tuple(t.shape)).astype(np.float64)\n\n\ndef read(*tensors):\n    reader = Reader(list(tensors))\n    torch.zeros(reader)\n    return reader.read\n\n\ndef back(y, like):\n    flat = [float(v) for v in np.asarray(y, dtype=np.float64).reshape(-1)]\n    return torch.tensor(flat, dtype=like.dtype).reshape(tuple(y.shape))\n'
INDEX_SOFTMAX = (
    INDEX_WINDOW + "\n\ndef stable_softmax(x):\n"
    "    (v,) = read(x)\n"
    "    e = np.exp(v - v.max(-1, keepdims=True))\n"
    "    return back(e / e.sum(-1, keepdims=True), x)\n"
)


def test_code_torch_calls_back_inside_the_watchs_handler_is_refused():
    report, _ = _checked(2, "stable_softmax", INDEX_SOFTMAX)
    assert report.score == 0
    # the learner's __index__ is refused as soon as it runs unwatched (before
    # the thirty-seventh red team's fix, the caught error was what gave it away)
    assert "from inside its own machinery" in report.first_hint


@needs_bwrap
def test_the_grader_refuses_code_called_back_inside_the_watchs_handler(tmp_path):
    grade = _graded(tmp_path, 2, "stable_softmax", INDEX_SOFTMAX)
    assert grade.points == 0, grade


#: The thirty-sixth red team's reads (3/3, 3/3, 2/2 and 4/4 in the grader
#: before the fix): F.one_hot(t, -1)'s width is the largest id, read out of
#: torch one byte per call; and a learner's subclass of Tensor, whose C methods
#: (numpy) counted as the learner's module, called back inside the watch's
#: function handler (a size's __index__, a list's __len__), where the function
#: mode is lifted.
SUBCLASS = (
    "import numpy as np\nimport torch\n\n\nclass Plain(torch.Tensor):\n    pass\n"
)
RED_TEAM_36 = {
    "one-hot width": (
        2,
        "stable_softmax",
        "import numpy as np\nimport torch\nimport torch.nn.functional as F\n\n\n"
        "def number(t):\n"
        "    return F.one_hot(t.reshape(1), -1).shape[-1] - 1\n\n\n"
        "def stable_softmax(x):\n"
        "    q = (x.abs() * 2**16).round().long().reshape(-1)\n"
        "    sign = (x < 0).long().reshape(-1)\n"
        "    values = []\n"
        "    for i in range(q.shape[0]):\n"
        "        v = sum(\n"
        "            number(torch.div(q[i], 256**k, rounding_mode='floor') % 256)"
        " * 256**k\n"
        "            for k in range(5)\n"
        "        ) / 2**16\n"
        "        values.append(-v if number(sign[i]) else v)\n"
        "    v = np.array(values).reshape(tuple(x.shape))\n"
        "    e = np.exp(v - v.max(-1, keepdims=True))\n"
        "    return torch.tensor(e / e.sum(-1, keepdims=True), dtype=x.dtype)\n",
    ),
    "subclass numpy in an __index__": (
        2,
        "stable_softmax",
        SUBCLASS + "\n\nclass Size:\n"
        "    def __init__(self, x, box):\n"
        "        self.x, self.box = x, box\n\n"
        "    def __index__(self):\n"
        "        v = self.x.as_subclass(Plain).numpy()\n"
        "        e = np.exp(v - v.max(-1, keepdims=True))\n"
        "        self.box.append(e / e.sum(-1, keepdims=True))\n"
        "        return self.x.shape[-1]\n\n\n"
        "def stable_softmax(x):\n"
        "    box = []\n"
        "    x.split([Size(x, box)], -1)\n"
        "    return torch.tensor(box[0], dtype=x.dtype)\n",
    ),
    "subclass numpy in a __len__": (
        1,
        "embed_one_hot",
        SUBCLASS + "\n\nclass Sizes(list):\n"
        "    def __len__(self):\n"
        "        if self.job is not None:\n"
        "            job, self.job = self.job, None\n"
        "            job()\n"
        "        return list.__len__(self)\n\n\n"
        "def embed_one_hot(ids, table):\n"
        "    box = []\n"
        "    sizes = Sizes([table.shape[-1]])\n"
        "    sizes.job = lambda: box.append(\n"
        "        table.as_subclass(Plain).numpy()[ids.as_subclass(Plain).numpy()]\n"
        "    )\n"
        "    table.unflatten(-1, sizes)\n"
        "    return torch.tensor(box[0], dtype=table.dtype)\n",
    ),
    "subclass numpy, LayerNorm in NumPy": (
        4,
        "layer_norm",
        SUBCLASS + "\n\nclass Sizes(list):\n"
        "    def __len__(self):\n"
        "        if self.job is not None:\n"
        "            job, self.job = self.job, None\n"
        "            job()\n"
        "        return list.__len__(self)\n\n\n"
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    box = []\n\n"
        "    def job():\n"
        "        v = x.as_subclass(Plain).numpy()\n"
        "        z = (v - v.mean(-1, keepdims=True)) / np.sqrt(\n"
        "            v.var(-1, keepdims=True) + eps\n"
        "        )\n"
        "        g, b = gamma.as_subclass(Plain).numpy(), beta.as_subclass(Plain).numpy()\n"
        "        box.append(z * g + b)\n\n"
        "    sizes = Sizes([x.shape[-1]])\n"
        "    sizes.job = job\n"
        "    x.unflatten(-1, sizes)\n"
        "    return torch.tensor(box[0], dtype=x.dtype)\n",
    ),
}


@needs_bwrap
@pytest.mark.parametrize(
    "name", ["one-hot width", "subclass numpy in a __len__"], ids=["width", "len"]
)
def test_the_grader_refuses_the_thirty_sixth_red_teams_reads(tmp_path, name):
    number, key, source = RED_TEAM_36[name]
    grade = _graded(tmp_path, number, key, source)
    assert grade.points == 0, grade


def test_a_one_hot_given_its_width_passes_and_one_without_is_told_why():
    honest = (
        "def embed_one_hot(ids, table):\n"
        "    return F.one_hot(ids, {width}).to(table.dtype) @ table\n"
    )
    report, exercise = _checked(
        1, "embed_one_hot", honest.format(width="table.shape[0]")
    )
    assert report.score == pytest.approx(exercise.points), report.first_hint
    report, _ = _checked(1, "embed_one_hot", honest.format(width="-1"))
    assert report.score == 0
    assert "give it num_classes as an int" in report.first_hint


def test_a_tensor_of_the_learners_own_class_is_refused_by_name():
    """Torch calls an argument's methods back where the function mode is off,
    so where an allowlist holds, an object of the learner's own class (a
    subclass of Tensor or of list too) is refused, with a hint that says so."""
    source = (
        SUBCLASS + "\n\ndef stable_softmax(x):\n"
        "    y = x.as_subclass(Plain)\n"
        "    e = (y - y.amax(-1, keepdim=True)).exp()\n"
        "    return (e / e.sum(-1, keepdim=True)).as_subclass(torch.Tensor)\n"
    )
    report, _ = _checked(2, "stable_softmax", source)
    assert report.score == 0
    assert "an object of your own class handed to torch" in report.first_hint


#: The thirty-seventh red team's reads (3/3, 2/2, 4/4, 3/3, 4/4 and 3/3 in the
#: grader before the fix): in the windows where torch lifts the function mode,
#: a call from C to C (map(torch.Tensor.numpy, [x]), functools.partial) gives
#: the profile hook no event. The windows: a size's __len__ called back inside
#: the watch's handler, and autograd's engine running a hook.
WINDOW_LEN = (
    "import numpy as np\nimport torch\n\n\nclass Sizes(list):\n"
    "    def __len__(self):\n"
    "        if self.job is not None:\n"
    "            job, self.job = self.job, None\n"
    "            job()\n"
    "        return list.__len__(self)\n"
)
RED_TEAM_37 = {
    "map(numpy) in a __len__": (
        1,
        "embed_one_hot",
        WINDOW_LEN + "\n\ndef embed_one_hot(ids, table):\n"
        "    box = []\n"
        "    sizes = Sizes([table.shape[-1]])\n"
        "    sizes.job = lambda: box.append(\n"
        "        list(map(torch.Tensor.numpy, [table]))[0][\n"
        "            list(map(torch.Tensor.numpy, [ids]))[0]\n"
        "        ]\n"
        "    )\n"
        "    table.unflatten(-1, sizes)\n"
        "    return torch.tensor(box[0], dtype=table.dtype)\n",
    ),
    "map(numpy) in a backward hook": (
        2,
        "stable_softmax",
        "import numpy as np\nimport torch\n\n\ndef stable_softmax(x):\n"
        "    box = []\n\n"
        "    def hook(grad):\n"
        "        v = list(map(torch.Tensor.numpy, [x]))[0]\n"
        "        e = np.exp(v - v.max(-1, keepdims=True))\n"
        "        box.append(e / e.sum(-1, keepdims=True))\n\n"
        "    a = x.detach().clone().requires_grad_()\n"
        "    a.register_hook(hook)\n"
        "    a.sum().backward()\n"
        "    return torch.tensor(box[0], dtype=x.dtype)\n",
    ),
    "partial(numpy) in an autograd.Function's backward": (
        2,
        "stable_softmax",
        "import functools\nimport numpy as np\nimport torch\n\n\n"
        "class Read(torch.autograd.Function):\n"
        "    box = []\n\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x.clone()\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        Read.box.append(functools.partial(torch.Tensor.numpy, x)())\n"
        "        return grad\n\n\n"
        "def stable_softmax(x):\n"
        "    Read.box.clear()\n"
        "    a = x.detach().clone().requires_grad_()\n"
        "    Read.apply(a).sum().backward()\n"
        "    v = Read.box[0]\n"
        "    e = np.exp(v - v.max(-1, keepdims=True))\n"
        "    return torch.tensor(e / e.sum(-1, keepdims=True), dtype=x.dtype)\n",
    ),
    "a list of the learner's own class, no method of its own": (
        4,
        "layer_norm",
        "import torch\n\n\nclass Sizes(list):\n    pass\n\n\n"
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    x = x.unflatten(-1, Sizes([x.shape[-1]]))\n"
        "    mean = x.mean(-1, keepdim=True)\n"
        "    var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
        "    return (x - mean) / (var + eps).sqrt() * gamma + beta\n",
    ),
}


@needs_bwrap
@pytest.mark.parametrize(
    "name",
    ["map(numpy) in a __len__", "map(numpy) in a backward hook"],
    ids=["len", "hook"],
)
def test_the_grader_refuses_the_thirty_seventh_red_teams_reads(tmp_path, name):
    number, key, source = RED_TEAM_37[name]
    grade = _graded(tmp_path, number, key, source)
    assert grade.points == 0, grade


#: The thirty-eighth red team's reads (3/3, 2/2 and 4/4 in the grader before
#: the fix): a plain tensor given a C callable as its own ``dim`` attribute,
#: which Tensor.__len__ calls with the function mode lifted; and attention's
#: exercise, whose own list (sdpa's) let .numpy() run.
SHADOWED_DIM = (
    "import functools\nimport itertools\nimport numpy as np\nimport torch\n\n\n"
    "def out(t):\n"
    "    sink = []\n"
    "    probe = torch.ones(1)\n"
    "    probe.dim = functools.partial(\n"
    "        next,\n"
    "        itertools.chain(\n"
    "            filter(None, map(sink.append, map(torch.Tensor.numpy, [t]))),\n"
    "            itertools.repeat(1),\n"
    "        ),\n"
    "    )\n"
    "    len(probe)\n"
    "    return sink[0]\n"
)
RED_TEAM_38 = {
    "a shadowed dim, softmax in NumPy": (
        2,
        "stable_softmax",
        SHADOWED_DIM + "\n\ndef stable_softmax(x):\n"
        "    a = out(x)\n"
        "    e = np.exp(a - a.max(-1, keepdims=True))\n"
        "    return torch.tensor(e / e.sum(-1, keepdims=True), dtype=x.dtype)\n",
        "from inside its own machinery",
    ),
    "a shadowed dim, a lookup in NumPy": (
        1,
        "embed_one_hot",
        SHADOWED_DIM + "\n\ndef embed_one_hot(ids, table):\n"
        "    return torch.tensor(out(table)[out(ids)])\n",
        "from inside its own machinery",
    ),
    "numpy() in attention": (
        2,
        "attention",
        "import numpy as np\nimport torch\n\n\ndef attention(q, k, v):\n"
        "    a, b, c = q.numpy(), k.numpy(), v.numpy()\n"
        "    s = a @ np.swapaxes(b, -1, -2) / np.sqrt(a.shape[-1])\n"
        "    e = np.exp(s - s.max(-1, keepdims=True))\n"
        "    return torch.tensor(e / e.sum(-1, keepdims=True) @ c, dtype=q.dtype)\n",
        "numbers taken out of torch",
    ),
}


@needs_bwrap
def test_the_grader_refuses_a_shadowed_tensor_method(tmp_path):
    number, key, source, _ = RED_TEAM_38["a shadowed dim, softmax in NumPy"]
    grade = _graded(tmp_path, number, key, source)
    assert grade.points == 0, grade


#: The thirty-ninth red team's reads (3/3, 2/2, 4/4 and 3/3 in the grader
#: before the fix), past the screen (a match capture bound __deepcopy__ in a
#: class body, functools.update_wrapper set attributes by name): a tensor's
#: gradient given a C __deepcopy__ of its own, which Tensor.__deepcopy__ calls
#: with the function mode lifted; and a class attribute of torch.Tensor
#: replaced during the call and put back before it returned. Here the
#: attributes are set directly: the runtime's refusal, whatever the screen does.
READER = (
    "import copy\nimport functools\nimport itertools\nimport numpy as np\n"
    "import torch\n\n\n"
    "def reader(t, sink):\n"
    "    return functools.partial(\n"
    "        next,\n"
    "        itertools.chain(\n"
    "            filter(None, map(sink.append, map(torch.Tensor.numpy, [t]))),\n"
    "            itertools.repeat(None),\n"
    "        ),\n"
    "    )\n"
)
RED_TEAM_39 = {
    "a gradient's own __deepcopy__": READER + "\n\ndef stable_softmax(x):\n"
    "    sink = []\n"
    "    m = torch.empty(1, device='meta')\n"
    "    g = torch.empty(1, device='meta')\n"
    "    m.grad = g\n"
    "    g.__deepcopy__ = reader(x, sink)\n"
    "    copy.deepcopy(m)\n"
    "    a = sink[0]\n"
    "    e = np.exp(a - a.max(-1, keepdims=True))\n"
    "    return torch.tensor(e / e.sum(-1, keepdims=True), dtype=x.dtype)\n",
    "a class attribute of Tensor, put back": READER + "\n\ndef stable_softmax(x):\n"
    "    sink = []\n"
    "    name = '_clear_non_serializable_cached_data'\n"
    "    saved = torch.Tensor.__dict__[name]\n"
    "    type.__setattr__(torch.Tensor, name, reader(x, sink))\n"
    "    try:\n"
    "        copy.deepcopy(torch.empty(1, device='meta'))\n"
    "    finally:\n"
    "        type.__setattr__(torch.Tensor, name, saved)\n"
    "    a = sink[0]\n"
    "    e = np.exp(a - a.max(-1, keepdims=True))\n"
    "    return torch.tensor(e / e.sum(-1, keepdims=True), dtype=x.dtype)\n",
}


@needs_bwrap
def test_the_grader_refuses_a_gradients_own_deepcopy(tmp_path):
    source = RED_TEAM_39["a gradient's own __deepcopy__"]
    grade = _graded(tmp_path, 2, "stable_softmax", source)
    assert grade.points == 0, grade


#: The fortieth red team's reads (3/3, 2/2, 4/4, 3/3, and 4/4 and 3/3 for the
#: blocks, in the grader before the fix): a dictionary key whose __eq__ is a C
#: callable, compared inside Tensor.__deepcopy__'s memo lookups with the
#: function mode lifted (the screen now refuses its decorator too; here the
#: method is set directly, for the runtime's refusal); and torch's own
#: nn.TransformerEncoderLayer on its slow path, its attention swapped.
MEMO_KEY = READER + (
    "\n\ndef stable_softmax(x):\n"
    "    sink = []\n\n"
    "    class Key:\n"
    "        def __init__(self, h):\n"
    "            self.h = h\n\n"
    "        def __hash__(self):\n"
    "            return self.h\n\n"
    "    Key.__eq__ = reader(x, sink)\n"
    "    memo = {}\n"
    "    memo[Key(id(memo))] = None\n"
    "    copy.deepcopy(torch.empty(1, device='meta'), memo)\n"
    "    a = sink[0]\n"
    "    e = np.exp(a - a.max(-1, keepdims=True))\n"
    "    return torch.tensor(e / e.sum(-1, keepdims=True), dtype=x.dtype)\n"
)


def test_an_array_of_objects_is_no_plain_argument():
    """The forty-first red team's note: NumPy calls the methods of an object
    array's elements inside torch's code (a / x runs Tensor.__rdiv__ in the
    watch's handler, the function mode lifted); numbers and strings in arrays
    stay plain."""
    import numpy as np

    from transformer_course.exercises import runner

    assert runner._own_objects((np.array([object()]),), {})
    assert runner._own_objects(([np.zeros(2, dtype=object)],), {})
    assert not runner._own_objects((np.arange(3), np.array(["a"])), {})


def test_code_of_a_module_the_job_wrote_counts_as_the_learners(tmp_path):
    """The forty-first red team's note: a %%writefile module's code, called back
    where the function mode is lifted, is the learner's, though its globals
    are a module's."""
    from transformer_course.exercises import runner

    (tmp_path / "helper_written.py").write_text("def here():\n    return 1\n")
    finder = runner._ScreenedImports([str(tmp_path)], [])
    spec = finder.find_spec("helper_written", [str(tmp_path)])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    watch = runner._Watch([])

    class Frame:  # what the profile hook is given, reduced to its globals
        f_globals = module.__dict__

    assert watch._learners(Frame)
    assert not watch._learners(type("Torch", (), {"f_globals": vars(torch)}))


#: The windows of passes 36 to 40, one row each: (exercise's chapter and key,
#: the cell, what its refusal says). Each earned full marks before its fix.
UNWATCHED = "from inside its own machinery"
WINDOW_READS = {
    **{
        f"36 {name}": (
            *row,
            "without its number of classes" if "width" in name else UNWATCHED,
        )
        for name, row in RED_TEAM_36.items()
    },
    **{f"37 {name}": (*row, UNWATCHED) for name, row in RED_TEAM_37.items()},
    **{f"38 {name}": row for name, row in RED_TEAM_38.items()},
    **{
        f"39 {name}": (2, "stable_softmax", source, UNWATCHED)
        for name, source in RED_TEAM_39.items()
    },
    "40 a dictionary key's own __eq__": (2, "stable_softmax", MEMO_KEY, UNWATCHED),
}


@pytest.mark.parametrize("name", sorted(WINDOW_READS))
def test_the_red_teams_reads_in_the_unwatched_windows_earn_nothing(name):
    number, key, source, expected = WINDOW_READS[name]
    report, _ = _checked(number, key, source)
    assert report.score == 0, report.first_hint
    assert expected in report.first_hint
