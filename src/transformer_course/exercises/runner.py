"""Calling a learner's function on a check's inputs: the one execution model.

The notebook's instant feedback (``ex.check``) and the grader's sandbox call the
learner's function through :func:`call_cases` here, so both see the same thing:

* every call gets deep copies of the inputs, and reports which inputs it changed;
* functions an exercise forbids (``torch.softmax`` in a softmax exercise) are
  detected at both PyTorch levels (the Python API and the aten operators), so
  ``Tensor.softmax``, ``F.softmax`` and ``torch.ops.aten._softmax`` are all caught;
* a function that uses the course package (``tc``, the answer key) is refused
  before it is called: the grader's sandbox does not contain the package;
* returned values become plain data (tensors, numbers, strings, lists, tuples,
  dicts) within size limits: anything else is described, not kept.

This file must run where the course package cannot be imported: it imports only
the standard library, torch and (if present) IPython. The grader's sandbox runs it
as a script (:func:`main`), see :mod:`transformer_course.grading.grade`.
"""

from __future__ import annotations
import __future__

import ast
import base64
import builtins
import contextlib
import copy
import dis
import functools
import gc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import itertools
import json
import linecache
import math
import operator
import os
import re
import select
import shutil
import signal
import socket
import sys
import sysconfig
import tempfile
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "FORBIDDEN",
    "LIMITS",
    "WIRE_LIMITS",
    "ForbiddenUse",
    "WireError",
    "call_cases",
    "decode_result",
    "encode_result",
    "main",
    "to_plain",
    "uses_course_package",
]

COURSE_PACKAGE = "transformer_course"
#: The error of an outcome whose call hit the stub's own ``raise NotImplementedError``.
NOT_ATTEMPTED = "NotAttempted"

#: Size limits on what a learner's function may return (per call).
LIMITS = {"elements": 1_000_000, "items": 10_000, "string": 100_000, "depth": 20}

# Leaving torch for NumPy, SciPy or Python lists (where a library's own softmax
# or indexing would go unseen): every way a tensor's numbers leave torch
_TO_NUMPY = (
    "numpy",
    "__array__",
    "tolist",
    "untyped_storage",
    "_typed_storage",
    "storage",
    "__dlpack__",
    "to_dlpack",
    "_to_dlpack",
    "data_ptr",
    # and back into torch from another library's memory
    "from_numpy",
    "frombuffer",
    "from_dlpack",
)

#: The copying twins of view operators (``narrow_copy``, ``as_strided_copy``,
#: ``unsafe_split_with_sizes``): each reads a table's rows as its view does.
#: Operators that read chosen rows of a table under other names: a diagonal
#: with an offset (row i of the (1, V, D) view), nearest or whole-pixel
#: resampling and strided pooling (a pixel i picked by its scale or stride) (the
#: twenty-ninth red team).
_ROW_READERS = frozenset(
    {
        # an order statistic is a row once a monotone offset orders the rows
        # (kthvalue of table + 1e4 * row: the thirtieth red team), and a
        # storage moved or cut (set_ with an offset, resize_) reads one too
        "kthvalue",
        "topk",
        "sort",
        "msort",
        "median",
        "nanmedian",
        "mode",
        "diagonal",
        "diagonal_copy",
        "diag",
        "linalg_diagonal",
        "interpolate",
        "upsample",
        "upsample_nearest",
        "upsample_bilinear",
        "upsample_nearest1d",
        "upsample_nearest2d",
        "upsample_nearest3d",
        "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d",
        "_upsample_nearest_exact3d",
        "upsample_linear1d",
        "upsample_bilinear2d",
        "upsample_bicubic2d",
        "upsample_trilinear3d",
        "_upsample_bilinear2d_aa",
        "_upsample_bicubic2d_aa",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "max_pool1d_with_indices",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
        "fractional_max_pool2d",
        "fractional_max_pool3d",
        "lp_pool1d",
        "lp_pool2d",
        "max_unpool1d",
        "max_unpool2d",
        "pixel_unshuffle",
        "channel_shuffle",
        "native_channel_shuffle",
    }
)


#: Tensor methods that move or cut a tensor's storage (set_ with an offset is
#: as_strided; resize_ of a flipped copy kept row i): watched where Python calls
#: them, not as operators, which torch's own kernels call to size their outputs.
_STORAGE_MOVES = frozenset({"set_", "resize_", "resize_as_"})

#: Kernels that compute log(1 + e^x) stably, each a two-way log-sum-exp.
_STABLE_LOG_ADDS = frozenset(
    {
        "softplus",
        "log_sigmoid",
        "logsigmoid",
        "log_sigmoid_forward",
        "binary_cross_entropy_with_logits",
        "soft_margin_loss",
        "multilabel_soft_margin_loss",
    }
)


def _aten_operators(names: frozenset[str]) -> frozenset[str]:
    """Those of ``names`` that are aten operators (the others are Python
    functions only, which the function mode sees by name)."""
    return frozenset(name for name in names if hasattr(torch.ops.aten, name))


_COPYING_VIEWS = frozenset(
    {
        "narrow_copy",
        "as_strided_copy",
        "select_copy",
        "slice_copy",
        "split_copy",
        "split_with_sizes_copy",
        "unbind_copy",
        "unfold_copy",
        "unsafe_split",
        "unsafe_split_with_sizes",
        "unsafe_chunk",
    }
)


#: What an exercise may forbid: key -> (what the hint names, Python-level function
#: names, aten operator names). Both levels are watched while the function runs.
FORBIDDEN: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {
    # logsumexp too: exp(x - logsumexp(x)) is a softmax whose stabilising step
    # (the subtraction of the maximum, the exercise's point) torch does for you
    "softmax": (
        "torch.softmax (also F.softmax, Tensor.softmax, log_softmax, logsumexp, "
        "sparse softmax and NumPy/SciPy versions)",
        frozenset(
            {
                "softmax",
                "log_softmax",
                "_softmax",
                "_log_softmax",
                "_masked_softmax",
                "logsumexp",
                "logcumsumexp",
                "logaddexp",
                "logaddexp2",
                # CTC's forward pass adds in log space, stably: a log-sum-exp
                # with its scores placed on a label's steps (the twenty-ninth
                # red team)
                "ctc_loss",
                # the stable two-way log-add under other names: r + softplus(c -
                # r) is logaddexp(r, c) (the thirtieth red team)
                *_STABLE_LOG_ADDS,
                *_TO_NUMPY,
            }
        ),
        frozenset(
            {
                "logsumexp",
                "logcumsumexp",
                "_logcumsumexp",
                "logaddexp",
                "logaddexp2",
                "ctc_loss",
                "_ctc_loss",
                "_cudnn_ctc_loss",
                *_aten_operators(_STABLE_LOG_ADDS),
                "_softmax",
                "_log_softmax",
                "_safe_softmax",
                "_masked_softmax",
                "_masked_softmax_backward",
                "_sparse_softmax",
                "_sparse_log_softmax",
            }
        ),
    ),
    "scaled_dot_product_attention": (
        "F.scaled_dot_product_attention (and nn.MultiheadAttention)",
        frozenset(
            {
                "scaled_dot_product_attention",
                "multi_head_attention_forward",
                "_scaled_dot_product_attention_math",
            }
        ),
        frozenset(
            {
                "_fused_sdp_choice",
                "_scaled_dot_product_attention_math",
                "_scaled_dot_product_flash_attention_for_cpu",
                "_scaled_dot_product_flash_attention",
                "_scaled_dot_product_efficient_attention",
                "_scaled_dot_product_cudnn_attention",
                "_native_multi_head_attention",
            }
        ),
    ),
    # Every normalisation torch has: group, batch and instance norm (on reshaped
    # inputs) and RMSNorm (of the centred input) all compute a LayerNorm too.
    "layer_norm": (
        "F.layer_norm (also nn.LayerNorm, torch.layer_norm, and torch's group, "
        "batch, instance and RMS norms)",
        frozenset(
            {
                "layer_norm",
                "native_layer_norm",
                "group_norm",
                "native_group_norm",
                "batch_norm",
                "native_batch_norm",
                "instance_norm",
                "rms_norm",
                "local_response_norm",
                *_TO_NUMPY,
            }
        ),
        frozenset(
            {
                "layer_norm",
                "native_layer_norm",
                "group_norm",
                "native_group_norm",
                "batch_norm",
                "native_batch_norm",
                "_native_batch_norm_legit",
                "_native_batch_norm_legit_no_training",
                "_batch_norm_impl_index",
                "_batch_norm_with_update",
                "_batch_norm_no_update",
                "instance_norm",
                "rms_norm",
                "_fused_rms_norm",
            }
        ),
    ),
    # A whole block: torch's encoder layer (with norm_first, pre- or post-norm)
    "transformer_layer": (
        "nn.TransformerEncoderLayer (or nn.MultiheadAttention): build the block "
        "from your layer_norm and mlp_forward and the given self_attention",
        frozenset(
            {
                "multi_head_attention_forward",
                "_transformer_encoder_layer_fwd",
                "_native_multi_head_attention",
            }
        ),
        frozenset({"_transformer_encoder_layer_fwd", "_native_multi_head_attention"}),
    ),
    # Any way of reading rows out of the table: indexing, slicing, splitting.
    "embedding": (
        "F.embedding, nn.Embedding or indexing (table[ids], table[i], "
        "table[i:i+1], torch.eye(V)[ids], a loop over a tensor's elements, narrow, "
        "split, unbind, index_select, tolist, NumPy)",
        frozenset(
            {
                "embedding",
                "index_select",
                "take",
                "gather",
                "embedding_bag",
                "narrow",
                "unbind",
                "split",
                "chunk",
                "tensor_split",
                "as_strided",
                "masked_select",
                "unfold",
                # the copying twins of the views, whose kernels copy the rows
                # without the view operators (narrow_copy and .item() looked the
                # rows up: the twenty-eighth red team)
                *_COPYING_VIEWS,
                *_ROW_READERS,
                *_STORAGE_MOVES,
                # sampling the table as an image, nearest pixel: a lookup too
                "grid_sample",
                "grid_sampler",
                "grid_sampler_2d",
                "grid_sampler_3d",
                # leaving torch for Python lists or raw memory, where a row is
                # read without any operator torch sees
                *_TO_NUMPY,
            }
        ),
        frozenset(
            {
                "embedding",
                "index",
                "index_select",
                "select",
                "slice",
                "narrow",
                "unbind",
                "split",
                "split_with_sizes",
                "unsafe_split",
                "chunk",
                "tensor_split",
                "masked_select",
                "unfold",
                "take",
                "gather",
                "_embedding_bag",
                "_embedding_bag_forward_only",
                "grid_sampler",
                "grid_sampler_2d",
                "grid_sampler_3d",
                "_grid_sampler_2d_cpu_fallback",
                "cudnn_grid_sampler",
                *_aten_operators(_COPYING_VIEWS | _ROW_READERS),
            }
        ),
    ),
}


# Attention computes a softmax: every spelling of it is a softmax too (the fused
# CPU kernel never calls aten::_softmax; with identity keys and values and scale
# 1 its weights are softmax(x)).
FORBIDDEN["softmax"] = (
    FORBIDDEN["softmax"][0] + ", or attention's fused kernels",
    FORBIDDEN["softmax"][1] | FORBIDDEN["scaled_dot_product_attention"][1],
    FORBIDDEN["softmax"][2] | FORBIDDEN["scaled_dot_product_attention"][2],
)

#: The operators an exercise that forbids something may run, besides every
#: operator torch tags pointwise (``add``, ``exp``, ``where``, ``masked_fill``):
#: shaping and viewing, making and copying tensors, reductions, matrix products,
#: building a one-hot (``scatter_``, ``index_put_``) and a mask (``tril``).
#: Anything else is refused by name, whatever it computes: thirty red teams
#: found a forbidden function under one more spelling each time (an order
#: statistic, a pooling, a resampling, a loss), and a list of what is allowed
#: ends that, where a list of what is not could only grow. The forbidden
#: operators (:data:`FORBIDDEN`) are refused first, pointwise or not.
_PLAIN_OPERATORS = frozenset(
    {
        # views and shapes
        "view",
        "_unsafe_view",
        "_reshape_alias",
        "reshape",
        "expand",
        "expand_as",
        "permute",
        "transpose",
        "t",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "movedim",
        "alias",
        "detach",
        "lift_fresh",
        "lift_fresh_copy",
        "view_as_real",
        "_conj",
        "resolve_conj",
        "resolve_neg",
        # making, copying and converting tensors
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "fill",
        "fill_",
        "zero_",
        "scalar_tensor",
        "arange",
        "linspace",
        "eye",
        "clone",
        "contiguous",
        "copy",
        "copy_",
        "_to_copy",
        "to",
        # listed, but refused as numbers out of torch (_leaks) outside the
        # runner's comparison and F.one_hot's range check
        "_local_scalar_dense",
        "is_nonzero",
        "equal",
        "resize_",  # an out= argument's, by torch's own kernels
        "cat",
        "stack",
        "repeat",
        "tile",
        "repeat_interleave",
        "tril",
        "triu",
        "masked_fill_",
        "where_",
        "scatter",
        "scatter_",
        "scatter_add",
        "scatter_add_",
        "index_fill",
        "index_fill_",
        "index_put",
        "index_put_",
        "_index_put_impl_",
        "nonzero",
        "one_hot",
        # reductions along a dimension
        "sum",
        "mean",
        "nansum",
        "nanmean",
        "prod",
        "amax",
        "amin",
        "max",
        "min",
        "aminmax",
        "argmax",
        "argmin",
        "any",
        "all",
        "count_nonzero",
        "var",
        "var_mean",
        "std",
        "std_mean",
        "norm",
        "linalg_vector_norm",
        "cumsum",
        "cumprod",
        "cummax",
        "cummin",
        "allclose",
        "isclose",
        # matrix products
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "addmv",
        "mv",
        "dot",
        "vdot",
        "outer",
        "matmul",
        "_addmm_activation",
        # dropout, which an honest block may keep, and a layer's initialisation
        "native_dropout",
        "bernoulli",
        "bernoulli_",
        "uniform_",
        "normal_",
        "rand",
        "randn",
        "rand_like",
        "randn_like",
    }
)

#: Operators plain for every forbidden key but the lookup: reading chosen
#: elements (``x[i]``, ``x[:, :n]``, a head's slice) is what ``embedding`` forbids.
_READING_OPERATORS = frozenset(
    {
        "select",
        "slice",
        "index",
        "narrow",
        "split",
        "split_with_sizes",
        "unbind",
        "chunk",
        "tensor_split",
        "index_select",
        "gather",
        "masked_select",
        "diagonal",
        "as_strided",
        "slice_scatter",
        "select_scatter",
        "flip",
        "roll",
        "diag",
        "diag_embed",
        # order statistics: a maximum by sorting (a lookup of a row elsewhere)
        "sort",
        "msort",
        "argsort",
        "topk",
        "kthvalue",
        "median",
        "nanmedian",
        "mode",
    }
)

#: Per forbidden key, what it allows besides the plain operators: attention
#: may take torch's softmax (only the softmax exercises forbid it).
_ALSO_ALLOWED: dict[str, frozenset[str]] = {
    "embedding": frozenset(),
    "softmax": _READING_OPERATORS,
    "layer_norm": _READING_OPERATORS,
    "scaled_dot_product_attention": _READING_OPERATORS
    | {"_softmax", "_log_softmax", "_safe_softmax", "logsumexp"},
}


def _pointwise_operators() -> frozenset[str]:
    """The aten operators torch tags pointwise (``add``, ``exp``, ``where``)."""
    names = set()
    every = {
        qualified.split("::")[1].split(".")[0]
        for qualified in torch._C._dispatch_get_all_op_names()
        if qualified.startswith("aten::")
    }
    for name in every:
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            if torch.Tag.pointwise in getattr(packet, overload).tags:
                names.add(name)
                break
    return frozenset(names)


_POINTWISE = _pointwise_operators()


def allowed_operators(keys: Sequence[str]) -> frozenset[str] | None:
    """The aten operators an exercise forbidding ``keys`` may run, or None
    where none of its keys limits them (a whole block: ``transformer_layer``).
    The forbidden operators themselves are refused before this list is read."""
    limiting = [key for key in keys if key in _ALSO_ALLOWED]
    if not limiting:
        return None
    also = frozenset.intersection(*(_ALSO_ALLOWED[key] for key in limiting))
    plain = _PLAIN_OPERATORS | also
    return _POINTWISE | plain | _in_place(plain)


# torch's own Python re-implementations of its operators (references and
# decompositions): a function there that starts with a forbidden name computes it.
_TORCH_PYTHON = ("torch._refs", "torch._decomp", "torch._prims.")
#: Libraries whose own functions are matched by name against the forbidden list:
#: torch, and the softmax of SciPy (scipy.special.softmax) and scikit-learn.
_LIBRARIES = ("torch", "scipy", "numpy", "sklearn")
#: torch.compile's machinery: a kernel it generated runs no operator the watch
#: sees, so calling compiled code is refused wherever something is forbidden.
_COMPILED = ("torch._inductor", "torch._dynamo")

#: What a learner's function never needs, and what switches the watch off or
#: searches the process for it: the profile hook, torch's mode stacks, the
#: kernels' library. Called from the learner's code, it counts as forbidden.
ESCAPES = frozenset(
    {
        "currentframe",
        "setprofile",
        "settrace",
        "_getframe",
        "get_objects",
        "get_referrers",
        "_pop_torch_function_stack",
        "_pop_torch_dispatch_stack",
        "_disable_current_modes",
        "_pop_mode",
        "_pop_mode_temporarily",
        "_destroy",
        # what finds the watch's modes and hook (red team, pass 19)
        "_get_current_dispatch_mode",
        "_get_current_dispatch_mode_stack",
        "_get_current_function_mode",
        "_get_current_function_mode_stack",
        "_get_dispatch_stack_at",
        "_get_function_stack_at",
        "getprofile",
        "gettrace",
        "get_referents",
    }
)

#: The cyclic collector's switches (``gc.enable``): off while a function that
#: forbids something runs (see :func:`call_cases`), and left so.
_COLLECTOR_SWITCHES = frozenset({"enable", "collect", "set_threshold", "unfreeze"})

#: Starting a process (red team, pass 19: a helper started inside the call did
#: the forbidden work where no watch reaches): refused while something is forbidden.
PROCESSES = frozenset(
    {
        "fork_exec",
        "fork",
        "forkpty",
        "posix_spawn",
        "posix_spawnp",
        "execv",
        "execve",
        "system",
        "spawnv",
        "spawnve",
    }
)
_PROCESS_MODULES = ("posix", "nt", "os", "_posixsubprocess")
#: Starting a thread with _thread directly (red team, pass 20: threading's hook
#: never reaches it): refused too.
_RAW_THREADS = frozenset(
    {"start_new_thread", "_start_new_thread", "start_joinable_thread", "start_new"}
)

#: Dispatch keys whose kernels wrap another's and pass the call on (or only
#: infer shapes): a forbidden operator's kernels are replaced for every other
#: key the dispatcher holds one for (see :func:`_kernel_keys`).
_PASSING_KEYS = (
    "Autograd",
    "Tracer",
    "FuncTorch",
    "Functionalize",
    "ADInplaceOrView",
    "Autocast",
    "Batched",
    "Python",
    "Meta",
    "BackendSelect",
    "Named",
    "Conjugate",
    "Negative",
    "ZeroTensor",
)


def _kernel_keys(qualified: str) -> list[str]:
    """The dispatch keys that compute ``aten::qualified`` on some backend:
    every key with a kernel of its own in the dispatcher's table (CPU, CUDA,
    MkldnnCPU, NestedTensorCPU, the sparse and composite ones...) but those
    that pass the call on. Read from the dispatcher, not listed by hand: the
    fifty-second red team's softmax ran on MkldnnCPU's kernel, which a list of
    CPU, CUDA, sparse and composite keys left in place. Read once per
    operator (the table does not change while the course runs)."""
    if qualified in _KERNEL_KEYS_READ:
        return list(_KERNEL_KEYS_READ[qualified])
    keys = []
    for line in torch._C._dispatch_dump(f"aten::{qualified}").splitlines():
        key, _, rest = line.partition(": registered at ")
        key = key.removesuffix("[alias]")
        if rest and key.isidentifier() and not key.startswith(_PASSING_KEYS):
            with contextlib.suppress(RuntimeError):  # "debug", no key
                if torch._C._dispatch_has_kernel_for_dispatch_key(
                    f"aten::{qualified}", key
                ):
                    keys.append(key)
    _KERNEL_KEYS_READ[qualified] = tuple(keys)
    return keys


_KERNEL_KEYS_READ: dict[str, tuple[str, ...]] = {}


class ForbiddenUse(Exception):  # noqa: N818  (reported to the learner by name)
    """The learner's function called something its exercise forbids."""


#: A hit's key for an operator outside :func:`allowed_operators`: "operator:kthvalue".
_OPERATOR = "operator:"
#: A hit's key for a number taken out of a tensor (``float(x)``, ``bool(x)``).
_NUMBERS_OUT = "numbers out"
#: A hit's key for an error of torch's that the learner's function caught.
_CAUGHT = "caught"
#: A hit's key for a write into a tensor the call did not make (see
#: :func:`_written_outside`).
_WRITTEN_OUTSIDE = "written outside"

#: A hit's key for the learner's code run where torch has lifted the watch's
#: function mode: called back from inside its handler (a size's ``__index__``,
#: a list's ``__len__``) or by autograd's engine (a backward hook).
_UNWATCHED = "unwatched"
#: What starts autograd's engine, whose hooks and ``backward`` methods run
#: without the function mode: refused where an allowlist holds.
_BACKWARD = frozenset({"backward", "grad"})

#: A hit's key for ``F.one_hot`` with no width of its own (``num_classes=-1``).
_ONE_HOT_WIDTH = "one-hot width"

#: A hit's key while torch formats a tensor as text (``print(x)`` in the function).
_PRINTED = "printed"
#: How a refusal of what the checks cannot follow starts (a printed tensor, a
#: number out of torch, a caught error): not cheating, and told so (:mod:`.core`).
CANNOT_FOLLOW = "this exercise's checks cannot follow"
PRINTED = f"{CANNOT_FOLLOW} a tensor printed"


def forbidden_message(key: str) -> str:
    if key == "escape":
        return (
            "this exercise asks you not to switch off or look for its checks "
            "(sys.setprofile, gc.get_objects, sys._getframe, torch's mode stacks) "
            "or to start another process"
        )
    if key == "compiled":
        return (
            "this exercise cannot check code compiled with torch.compile (its "
            "kernels run no operation the checks see): write it in plain PyTorch"
        )
    if key == _NUMBERS_OUT:
        return (
            f"{CANNOT_FOLLOW} a tensor's numbers taken out of torch inside your "
            "function (float(x), x.item(), bool(x) in an if or an assert, "
            "torch.equal or allclose, a shape that depends on the values such as "
            "x[mask] or nonzero): keep them in tensors (torch.where instead of an "
            "if), and run sanity checks on values (an assert, an if, a print) "
            "outside the function, on what it returns"
        )
    if key == _WRITTEN_OUTSIDE:
        return (
            f"{CANNOT_FOLLOW} a write into a tensor your function did not make "
            "with torch (one made in another cell, one on a NumPy array's memory "
            "such as torch.as_tensor(array), or a view of either), with copy_, an "
            "in-place operation or out=: build the tensors you write into inside "
            "the function with torch (torch.empty_like, torch.zeros, clone)"
        )
    if key == _CAUGHT:
        return (
            f"{CANNOT_FOLLOW} an error of torch's caught inside "
            "your function (a caught error answers a question about the numbers, "
            "such as whether an id is in range): let it propagate, or test with "
            "tensors"
        )
    if key == _UNWATCHED:
        return (
            f"{CANNOT_FOLLOW} code of yours that torch runs from inside its own "
            "machinery, where they are off: an object of your own class handed to "
            "torch (its __index__ or __len__ called back while torch reads a size), "
            "a tensor given an attribute of your own (x.dim = ...), "
            "or a gradient computed inside the function (backward, autograd.grad, "
            "a hook): pass plain ints, lists and tensors, and compute no gradients "
            "here"
        )
    if key == _ONE_HOT_WIDTH:
        return (
            f"{CANNOT_FOLLOW} F.one_hot without its number of classes: give it "
            "num_classes as an int (the number of rows of the table, table.shape[0]); "
            "without it, one_hot reads the largest id out of the tensor to choose "
            "its width, which the checks cannot follow"
        )
    if key == _PRINTED:
        return (
            f"{PRINTED} inside your function (printing reads its numbers out of "
            "torch): print its shape or dtype, or print outside the function"
        )
    if key.startswith(_OPERATOR):
        name = key[len(_OPERATOR) :]
        return (
            f"this exercise's checks follow plain tensor arithmetic (elementwise "
            f"operations, sums, maxima, matrix products, reshaping), and torch's "
            f"{name!r} is not among them: write this step with those"
        )
    return f"this exercise asks you not to use {FORBIDDEN[key][0]}"


#: Writes that build a one-hot (``scatter_(-1, ids, 1.0)``, ``oh[n, ids] = 1``):
#: allowed in the lookup exercise only with one constant value. With a tensor of
#: values they move the table's rows by their ids (the table written to the
#: positions of its ids, or read a prefix at a time: the thirty-first red team).
_WRITES = frozenset(
    {
        "scatter",
        "scatter_",
        "scatter_add",
        "scatter_add_",
        "index_put",
        "index_put_",
        "_index_put_impl_",
    }
)


def _constant_write(func, args, kwargs) -> bool:
    """Whether ``func`` is no write of :data:`_WRITES`, or one of a single
    constant value (a Python number, or a tensor of one repeated value)."""
    name = func.overloadpacket.__name__
    if name not in _WRITES:
        return True
    if name.startswith("scatter") and "value" in func._overloadname:
        return True  # scatter_(dim, index, 1.0)
    at = 3 if name.startswith("scatter") else 2  # (self, dim, index, src)
    values = args[at] if len(args) > at else None
    if values is None:
        values = (kwargs or {}).get("src" if name.startswith("scatter") else "values")
    if not isinstance(values, torch.Tensor) or values.is_complex():
        return False
    # one value, or a tensor of one repeated value (torch.ones(n)): not the table
    flat = values.detach().reshape(-1)
    return flat.numel() <= 1 or bool(torch.all(flat == flat[0]))


_STORAGE_ID = torch._C._storage_id  # a tensor's StorageImpl's address
_STORAGE_RESIZABLE = torch.UntypedStorage.resizable
_UNTYPED_STORAGE = torch._C.TensorBase.untyped_storage
#: operator -> (the schema positions and names of the arguments it writes,
#: whether each of its returns is a new tensor rather than a view or an input)
_WRITES_AND_RETURNS: dict[object, tuple[tuple, tuple[bool, ...]]] = {}


def _writes_and_returns(func) -> tuple[tuple, tuple[bool, ...]]:
    """What torch's schema of ``func`` says it writes and returns (read once
    per operator)."""
    known = _WRITES_AND_RETURNS.get(func)
    if known is None:
        schema = func._schema
        written = tuple(
            (i, argument.name)
            for i, argument in enumerate(schema.arguments)
            if argument.alias_info is not None and argument.alias_info.is_write
        )
        fresh = tuple(r.alias_info is None for r in schema.returns)
        known = _WRITES_AND_RETURNS[func] = (written, fresh)
    return known


def _storages(value) -> dict[int, torch.Tensor]:
    """The tensors in ``value`` (a tensor, or a tuple, list or dict of them, as
    a case or an operator's arguments hold them), by their storage's address."""
    found, stack = {}, [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is torch.Tensor or kind is torch.nn.Parameter:
            with contextlib.suppress(RuntimeError):  # no storage (sparse, nested)
                found[_STORAGE_ID(item)] = item
        elif kind is tuple or kind is list:
            stack.extend(item)
        elif kind is dict:
            stack.extend(dict.values(item))
    return found


def _written_outside(func, args, kwargs, made: dict[int, torch.Tensor]) -> bool:
    """Whether ``func`` writes into a tensor whose storage is not in ``made``:
    the storages the call made and its inputs'. A tensor made in another cell
    can share its memory with a NumPy array (``t.numpy()``, ``torch.as_tensor``
    of an array): an input copied into it there is NumPy's to compute on, out
    of every watch's sight, and the result read back through the tensor (the
    fifty-sixth red team's softmax, LayerNorm and table lookup)."""
    written, _ = _writes_and_returns(func)
    for at, name in written:
        value = args[at] if at < len(args) else (kwargs or {}).get(name)
        if not made.keys() >= _storages(value).keys():
            return True
    return False


def _note_made(func, args, out, made: dict[int, torch.Tensor]) -> None:
    """Add ``func``'s new tensors in ``out`` to ``made``, by their storage's
    address: its returns that are neither views nor inputs, and a tensor that
    ``torch.tensor`` made of Python numbers (``lift_fresh``, whose memory is
    torch's own and so resizable; an array's memory, lifted by
    ``torch.as_tensor``, is not). Each is kept until the case ends: a storage
    freed during the call leaves its address to the next one made, which an
    array lifted then took over (the fifty-seventh red team)."""
    _, fresh = _writes_and_returns(func)
    outs = out if type(out) is tuple else (out,)
    for is_fresh, value in zip(fresh, outs, strict=False):
        if is_fresh:
            made.update(_storages(value))
    name = func.overloadpacket.__name__
    if name == "lift_fresh" and type(out) is torch.Tensor:
        with contextlib.suppress(RuntimeError), _NO_TORCH_FUNCTION():
            # untyped_storage, called from map's C code, which the profile hook
            # does not see (it refuses untyped_storage wherever numbers may not
            # leave torch), with the function mode off: a legacy constructor
            # (torch.Tensor([1.0])) makes its tensor with the mode still on
            if all(map(_STORAGE_RESIZABLE, map(_UNTYPED_STORAGE, (out,)))):
                made[_STORAGE_ID(out)] = out


_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction


#: Operators whose result is a Python value, or a shape, that depends on the
#: numbers (torch's own tags say which): ``float(x)``, ``int(x)``, ``bool(x)``,
#: ``torch.equal``, ``x.nonzero()``, ``x[mask]``. Where an allowlist holds, the
#: learner's code may use none of them: numbers that leave torch reach NumPy's
#: ufuncs (``np.logaddexp``), which no hook sees (the thirty-first red team
#: took floats out; integers, bits and shapes carry them as well).
_LEAKING_TAGS = (torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape)


def _leaks(func) -> bool:
    """Whether ``func`` hands a value-dependent Python value or shape out of torch."""
    return func.overloadpacket.__name__ in ("is_nonzero", "_local_scalar_dense") or any(
        tag in func.tags for tag in _LEAKING_TAGS
    )


_CLASS_MODULE = type.__dict__["__module__"]
_CLASS_MRO = type.__dict__["__mro__"]


def _module_of(kind: type) -> str:
    """``kind.__module__``, read without running code of the class's own (a
    metaclass's property, a ``str`` subclass's methods): "" if not a str, and
    for a class whose namespace holds a key that is not a plain str (type's
    getter looks ``__module__`` up in it, comparing keys with their own
    ``__eq__``: the fifty-fourth red team's enum with a str-subclass key ran
    there, inside the profile hook)."""
    if not _plain_namespace(kind):
        return ""
    module = _CLASS_MODULE.__get__(kind)
    return module if type(module) is str else ""


#: id(class) -> (a weak reference to it, its namespace's size when read, and
#: whether the namespace's keys were all plain str then)
_NAMESPACES_READ: dict[int, tuple[weakref.ref, int, bool]] = {}


def _plain_namespace(kind: type) -> bool:
    """Whether every key of ``kind``'s own namespace is a plain ``str``: read
    by going through the keys, which runs none of their code; again whenever
    the namespace's size changed. A key swapped in at the same size goes
    unseen: that needs the namespace itself (``cls.__dict__ == other`` hands it
    to ``other.__eq__``: the fifty-fifth red team, in a process of its own),
    which the screen refuses (``.__dict__``, ``vars``). Reading every key at
    every lookup instead made the checks two to four times slower."""
    namespace = _CLASS_DICT.__get__(kind)
    size = len(namespace)
    known = _NAMESPACES_READ.get(id(kind))
    if known is not None and known[0]() is kind and known[1] == size:
        return known[2]
    plain = all(type(key) is str for key in namespace)
    with contextlib.suppress(TypeError):  # no weak reference: read every time
        _NAMESPACES_READ[id(kind)] = (weakref.ref(kind), size, plain)
    return plain


_PARTIAL_FUNC = functools.partial.__dict__["func"]
_UFUNC = __import__("numpy").ufunc
_UFUNC_NAME = _UFUNC.__dict__["__name__"]
#: The C function types whose name, module and bound object the profile hook
#: reads, each with its own getters (their attributes run no Python code):
#: compared by identity, so that no class's __eq__ runs in the hook.
_C_FUNCTION_GETTERS = tuple(
    (
        kind,
        tuple(
            getter.__get__ if getter is not None else None
            for getter in (
                kind.__dict__.get(a) for a in ("__name__", "__module__", "__self__")
            )
        ),
    )
    for kind in (
        type(len),  # builtin_function_or_method: len, [].append (nearly every call)
        type(str.join),  # method_descriptor
        type("".__add__),  # method-wrapper
        type(object.__init__),  # wrapper_descriptor
        type(dict.__dict__["fromkeys"]),  # classmethod_descriptor
    )
)


def _c_function_parts(function: object) -> tuple[str, str, object]:
    """(name, module, bound object) of a C function, as its type's own getters
    give them; ("", "", None) for anything else (nothing of it is read)."""
    kind = type(function)
    getters = next((g for known, g in _C_FUNCTION_GETTERS if kind is known), None)
    if getters is None:
        return "", "", None
    name, module, owner = (
        get(function) if get is not None else None for get in getters
    )
    return (
        name if type(name) is str else "",
        module if type(module) is str else "",
        owner,
    )


#: sys.modules as the interpreter keeps it (a cell may rebind the name).
_SYS_MODULES = sys.modules
_MODULE_SPEC = importlib.machinery.ModuleSpec


#: id(a module's globals) -> the module, for the globals found to be a
#: module's (checked again by identity at every use)
_MODULE_OF_GLOBALS: dict[int, types.ModuleType] = {}


def _modules_named(namespace: dict) -> list[types.ModuleType]:
    """The modules of sys.modules that ``namespace`` names as its own, by its
    ``__name__`` and by its spec's name (``_collections_abc`` calls itself
    "collections.abc", another module), read without running any code of an
    object's own: only real modules are returned."""
    names = [dict.get(namespace, "__name__")]
    spec = dict.get(namespace, "__spec__")
    if type(spec) is _MODULE_SPEC:
        names.append(object.__getattribute__(spec, "__dict__").get("name"))
    found = []
    for name in names:
        if type(name) is str:
            module = dict.get(_SYS_MODULES, name)
            if types.ModuleType in _CLASS_MRO.__get__(type(module)):
                found.append(module)
    return found


def _owners_module(kind: type) -> str:
    """The module a C method of an object of class ``kind`` counts as: the
    class's, or, for a learner's subclass of a library's class, the library's
    (``t.as_subclass(T).numpy()`` is torch's ``numpy``: the thirty-sixth red
    team read a tensor out so)."""
    own = _module_of(kind)
    if own.startswith(_LIBRARIES):
        return own
    for base in _CLASS_MRO.__get__(kind):
        module = _module_of(base)
        if module.startswith(_LIBRARIES):
            return module
    return own


def _plain_types() -> frozenset[type]:
    """The exact types an argument of a torch call may have where an allowlist
    holds: none of them runs code of the learner's when torch reads it."""
    import numpy as np

    plain = {
        int, float, bool, complex, str, bytes, type(None), slice, type(...), range,
        torch.Size, torch.dtype, torch.device, torch.layout, torch.memory_format,
        torch.Tensor, torch.nn.Parameter, torch.Generator, np.ndarray,
    }  # fmt: skip
    plain |= {
        t
        for t in vars(np).values()
        if isinstance(t, type) and issubclass(t, np.generic)
    }
    plain |= {t for t in vars(torch.return_types).values() if isinstance(t, type)}
    return frozenset(plain)


def _own_objects(args, kwargs, limit: int = 100_000) -> bool:
    """Whether an argument of a torch call, or an element of a list, tuple or
    dict among them, is of a type not in :func:`_plain_types` (exact types: a
    learner's subclass of list or of Tensor counts as its own). Torch's Python
    code calls such an object's methods (``__len__``, ``__index__``) inside the
    watch's handler, where the function mode is lifted (the thirty-sixth and
    thirty-seventh red teams read numbers out there)."""
    # by identity: a learner's metaclass could run code in __eq__ or __hash__
    plain = _PLAIN_TYPE_IDS
    stack, seen = [args, kwargs or {}], 0
    while stack:
        value = stack.pop()
        kind = type(value)
        seen += 1
        if seen > limit:
            return True  # too many to look at: not plain arguments
        if kind is list or kind is tuple:
            stack.extend(value)
        elif kind is dict:
            stack.extend(dict.values(value))
            # and its keys: a key's __eq__ runs when torch's code looks up
            # another with the same hash (a memo's id(memo): the fortieth red team)
            stack.extend(dict.keys(value))
        elif id(kind) not in plain:
            return True
        elif kind is _NDARRAY and _ARRAY_DTYPE.__get__(value).hasobject:
            # an array of objects carries the learner's objects into torch's
            # code, whose methods NumPy calls (the forty-first red team's note)
            return True
        elif kind is torch.Tensor or kind is torch.nn.Parameter:
            if _TENSOR_DICT.__get__(value):
                # an attribute of its own shadows a method torch calls (x.dim =
                # ...: a C callable there, called by Tensor.__len__ with the
                # function mode lifted, read the numbers out: the thirty-eighth
                # red team)
                return True
            # and the tensors torch's code reaches from it (Tensor.__deepcopy__
            # copies the gradient: the thirty-ninth red team's had a
            # __deepcopy__ of its own)
            reached = [_TENSOR_BASE.__get__(value)]
            if _IS_LEAF.__get__(value) or _RETAINS_GRAD.__get__(value):
                reached.append(_TENSOR_GRAD.__get__(value))  # (else torch warns)
            stack.extend(t for t in reached if t is not None)
    return False


_TENSOR_DICT = torch.Tensor.__dict__["__dict__"]
_NDARRAY = __import__("numpy").ndarray
_ARRAY_DTYPE = _NDARRAY.__dict__["dtype"]
_TENSOR_GRAD = torch._C.TensorBase.__dict__["grad"]
_REQUIRES_GRAD = torch._C.TensorBase.__dict__["requires_grad"]
_DETACH = torch._C.TensorBase.__dict__["detach"]
_CLONE = torch._C.TensorBase.__dict__["clone"]
_SET_REQUIRES_GRAD = torch._C.TensorBase.__dict__["requires_grad_"]
_NDARRAY_COPY = _NDARRAY.__dict__["copy"]


def _copied(value: object, memo: dict[int, object] | None = None) -> object:
    """A copy of a case's inputs made by the runner alone (tuples, lists and
    dicts rebuilt, tensors cloned through torch's C methods, NumPy arrays
    copied, values that cannot change shared; an object met twice copied
    once), not by ``copy.deepcopy``, whose tables, hooks and ``__deepcopy__``
    methods a cell can reach: the twenty-second, forty-eighth and
    forty-ninth red teams each ran code of theirs there, before the watch,
    with the inputs in hand. Cases hold nothing else; anything else is an
    error of the runner's."""
    memo = {} if memo is None else memo
    if id(value) in memo:
        return memo[id(value)]
    kind = type(value)
    if kind is tuple:
        made = tuple([_copied(item, memo) for item in value])
    elif kind is list:
        made = [_copied(item, memo) for item in value]
    elif kind is dict:
        made = {key: _copied(item, memo) for key, item in value.items()}
    elif kind is torch.Tensor or kind is torch.nn.Parameter:
        made = _CLONE(_DETACH(value))  # (…): its shape, strides and dtype
        if kind is torch.nn.Parameter:
            made = torch.nn.Parameter(made, _REQUIRES_GRAD.__get__(value))
        elif _REQUIRES_GRAD.__get__(value):
            _SET_REQUIRES_GRAD(made, True)
    elif kind is _NDARRAY:
        made = _NDARRAY_COPY(value)
    elif id(kind) in _PLAIN_TYPE_IDS:
        made = value  # a number, a string, a dtype, a Size: nothing to change
    else:
        raise TypeError(f"a case holds a {kind.__name__}, which the runner cannot copy")
    memo[id(value)] = made
    return made


_TENSOR_BASE = torch._C.TensorBase.__dict__["_base"]
_IS_LEAF = torch._C.TensorBase.__dict__["is_leaf"]
_RETAINS_GRAD = torch._C.TensorBase.__dict__["retains_grad"]


#: The Python classes whose methods torch's own Python code calls on tensors
#: and storages while the watch's handler runs it with the function mode
#: lifted: a class attribute changed there during the call is the learner's
#: code run unwatched (the thirty-ninth red team replaced one of torch.Tensor's
#: through functools, called it, and put it back before the call returned).
def _class_snapshot() -> tuple[tuple[dict, tuple, tuple, tuple], ...]:
    owners = (
        torch.Tensor,
        torch.nn.Parameter,
        torch.storage.TypedStorage,
        torch.UntypedStorage,
        torch.storage._StorageBase,
    )
    snapshot = []
    for owner in owners:
        namespace = _CLASS_DICT.__get__(owner)
        # the items keep the values alive, so that no id is used again
        items = tuple(namespace.items())
        keys, values = tuple(map(id, namespace)), tuple(map(id, namespace.values()))
        snapshot.append((namespace, keys, values, items))
    return tuple(snapshot)


_CLASS_DICT = type.__dict__["__dict__"]


def _classes_changed(snapshot) -> bool:
    """Whether an attribute of a class in ``snapshot`` was added, removed or
    rebound since it was taken (by identity: no code of the values runs).

    Read in bulk (``map`` over the namespace, compared as tuples of ints): it
    runs inside the watch at every torch call, where each C call made from
    Python wakes the profile hook; a lookup per attribute woke it about 500
    times per call, which made the checks that watch torch twice as slow."""
    for namespace, keys, values, _ in snapshot:
        if tuple(map(id, namespace)) != keys:
            return True
        if tuple(map(id, namespace.values())) != values:
            return True
    return False


_PLAIN_TYPE_IDS = frozenset(map(id, _plain_types()))


_MODULE_DICT = types.ModuleType.__dict__["__dict__"]


def _replaced_modules() -> frozenset[int]:
    """The ids of the globals of library modules that replaced themselves in
    ``sys.modules`` by an object of a class of their own (``torch._VF``, whose
    ``__getattr__`` runs with the old module's globals; ``torch.backends``, whose
    ``ContextProp`` does), taken when the runner
    is imported, before any learner's cell: such code is not the learner's."""
    found = set()
    for name, module in list(sys.modules.items()):
        kind = type(module)
        if kind is types.ModuleType or not name.startswith(_LIBRARIES):
            continue
        for owner in kind.__mro__:  # torch.backends' GenericModule: PropModule's
            for value in vars(owner).values():
                code_globals = getattr(value, "__globals__", None)
                if isinstance(code_globals, dict):
                    found.add(id(code_globals))
    return frozenset(found)


_REPLACED_MODULES = _replaced_modules()


_TEST_FILE = "<instructor's test>"


def _failed_line(err: BaseException, test: str) -> str:
    """Where an instructor's test cell failed: " (line 3 of the test cell:
    assert double(2) == 4)", its text left out inside hidden tests, or "" if
    the cell's own code is not in the traceback."""
    line, trace = None, BaseException.__dict__["__traceback__"].__get__(err)
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == _TEST_FILE:
            line = trace.tb_lineno
        trace = trace.tb_next
    lines = test.splitlines()
    if line is None or not 0 < line <= len(lines):
        return ""
    hidden = False
    for text in lines[:line]:
        if "### BEGIN HIDDEN TESTS" in text:
            hidden = True
        elif "### END HIDDEN TESTS" in text:
            hidden = False
    said = ", a hidden test" if hidden else f": {lines[line - 1].strip()[:120]}"
    return f" (line {line} of the test cell{said})"


def _fixed_width(args, kwargs) -> bool:
    """Whether ``F.one_hot(*args, **kwargs)`` is given its width: an int (not a
    learner's object, whose ``__index__`` would run inside the watch's handler)
    of at least 0. With -1, the default, the width is the largest id + 1."""
    width = args[1] if len(args) > 1 else (kwargs or {}).get("num_classes", -1)
    return type(width) is int and width >= 0


def _an_id(func, args) -> bool:
    """Whether ``func`` reads one integer out of an integer tensor, as
    ``F.one_hot`` does to check its ids' range (the only place where the watch
    lets one out: see ``in_one_hot``)."""
    return (
        func.overloadpacket.__name__ == "_local_scalar_dense"
        and bool(args)
        and isinstance(args[0], torch.Tensor)
        and not args[0].is_floating_point()
        and not args[0].is_complex()
        and args[0].dtype is not torch.bool
    )


#: The watch's own mode handlers, which pass every call on to torch (through
#: :meth:`_Watch.run`).
_MODE_METHODS = ("__torch_function__", "__torch_dispatch__")


def _runners_own(frame) -> bool:
    """Whether the Python code that called torch here (the first frame outside
    torch) is the runner's comparison of the inputs with their copies
    (:func:`_same`, with ``torch.equal`` and ``bool``, under the watch), as the
    learner's code may not. That function alone: any other of the runner's, a
    cell could hand a tensor to (the stand-in of the hidden package formats its
    name, ``to_plain`` compares its limits), and its frame would carry the
    numbers out (the thirty-third red team)."""
    while frame is not None and (
        (frame.f_globals.get("__name__") or "").startswith("torch")
        or (frame.f_globals is globals() and frame.f_code.co_name in _MODE_METHODS)
        or frame.f_code is _Watch.run.__code__
    ):  # torch, and the watch's own modes, which pass every call on
        frame = frame.f_back
    return frame is not None and frame.f_code is _same.__code__


#: Views that torch's own kernels call inside operators the allowlist admits
#: (``cat`` of booleans narrows, ``repeat`` unfolds): where an exercise has an
#: allowlist, the mode refuses them when the learner calls them, and their
#: kernels are left in place (replaced, they failed honest one-hots: the
#: thirty-first red team).
_INNER_VIEWS = frozenset(
    {
        "narrow",
        "slice",
        "select",
        "unfold",
        "split",
        "split_with_sizes",
        "unbind",
        "chunk",
        "tensor_split",
        "as_strided",
        "diagonal",
        "index",
    }
)


def _printing(frame) -> bool:
    """Whether ``frame`` or a caller runs torch's formatting of a tensor as text
    (``print(x)``, ``repr``, an f-string): its numbers leave torch there, as
    ``tolist`` would take them, so the watch refuses it, but under its own name
    (a learner who prints to debug did not call a softmax)."""
    while frame is not None:
        if frame.f_globals.get("__name__") == "torch._tensor_str":
            return True
        frame = frame.f_back
    return False


def _in_place(names: frozenset[str]) -> frozenset[str]:
    """The in-place twins of ``names`` (``as_strided_`` of ``as_strided``)."""
    return frozenset(f"{name}_" for name in names if not name.endswith("_"))


def _with_in_place(names: frozenset[str]) -> frozenset[str]:
    """``names`` and their in-place twins: the watch matches names exactly, and
    ``as_strided_`` read a row as ``as_strided`` does (the thirtieth red team)."""
    return names | _in_place(names)


#: Torch's own Python re-implementations of a forbidden function, by module and
#: qualified name: they call none of its operators (the thirtieth red team).
#: The quantizable MultiheadAttention is a whole attention in Python, and
#: CrossMapLRN2d a local response norm, which on the centred input is a LayerNorm.
_REIMPLEMENTATIONS = (
    ("torch.ao.nn.quantizable", "", "scaled_dot_product_attention"),
    ("torch.nn.modules._functions", "CrossMapLRN2d", "layer_norm"),
    # nn.TransformerEncoderLayer's slow path (training mode) is plain Python
    # that calls no forbidden name once its self_attn is swapped for the given
    # attention: the block exercises' norms, residuals and MLP, done by torch
    # (the fortieth red team: pre_norm_block 4/4, post_norm_block 3/3)
    ("torch.nn.modules.transformer", "Transformer", "transformer_layer"),
)


def _is_course(module: str) -> bool:
    return module.split(".")[0] == COURSE_PACKAGE


class _Watch:
    """Records (and refuses) forbidden calls at both PyTorch levels."""

    def __init__(self, keys: Sequence[str]):
        unknown = set(keys) - set(FORBIDDEN)
        if unknown:
            raise ValueError(
                f"forbidden: expected keys among {sorted(FORBIDDEN)}, got {sorted(unknown)}"
            )
        self.functions = {n: k for k in keys for n in _with_in_place(FORBIDDEN[k][1])}
        self.ops = {
            n: k
            for k in keys
            for n in FORBIDDEN[k][2] | _aten_operators(_in_place(FORBIDDEN[k][2]))
        }
        self.allowed = allowed_operators(keys)
        if self.allowed is not None:  # no number leaves torch, whatever is forbidden
            # (attention's own list, sdpa's, did not hold .numpy(): the
            # thirty-eighth red team)
            for name in _with_in_place(frozenset(_TO_NUMPY)):
                self.functions.setdefault(name, _NUMBERS_OUT)
        self.names = {**self.ops, **self.functions}
        self.keys = frozenset(keys)
        self.prefixes = {n.strip("_"): k for n, k in self.names.items()}
        self.hits: list[str] = []
        self.course: list[str] = []  # course package code that ran
        self.home: dict | None = None  # the learner's namespace
        self.in_one_hot = 0  # F.one_hot runs (its ids may leave torch there)
        self.moded = False  # the modes are on: learner code runs under them
        self.classes = ()  # torch's classes as the call found them (_class_snapshot)
        self.torch_raised = False  # an error of torch's reached the learner's code
        # the tensors the call made, and its inputs, by their storage's address
        self.made: dict[int, torch.Tensor] = {}

    def tables(self) -> tuple:
        """What the watch looks for, by value: compared before and after a call,
        since code that reaches the watch could empty its tables."""
        tables = (self.functions, self.ops, self.names, self.prefixes)
        return (*(frozenset(table.items()) for table in tables), self.allowed)

    def hit(self, key: str, frame=None):
        """Record ``key`` (as :data:`_PRINTED` while torch formats a tensor as
        text in ``frame``, the caller's by default) and return the refusal."""
        frame = frame or sys._getframe(1)
        key = _PRINTED if key != "escape" and _printing(frame) else key
        if key not in self.hits:
            self.hits.append(key)
        return ForbiddenUse(forbidden_message(key))

    def modes(self):
        watch = self

        class Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                # an operator overload reads "as_strided.default": its packet's name
                name = str(getattr(func, "__name__", "")).split(".")[0]
                key = watch.functions.get(name)
                if key is not None:
                    raise watch.hit(key)
                if watch.allowed is None:
                    return func(*args, **(kwargs or {}))
                if name in _BACKWARD:
                    # autograd's engine runs hooks and backward methods with the
                    # function mode lifted (the thirty-seventh red team)
                    raise watch.hit(_UNWATCHED)
                if _own_objects(args, kwargs) or _classes_changed(watch.classes):
                    raise watch.hit(_UNWATCHED)
                inside = name == "one_hot"  # which reads its ids' range
                if inside and not _fixed_width(args, kwargs):
                    # its width would be the largest id: any integer, read out
                    # (the thirty-sixth red team, a byte per call)
                    raise watch.hit(_ONE_HOT_WIDTH)
                watch.in_one_hot += inside
                try:
                    return watch.run(func, args, kwargs)
                finally:
                    watch.in_one_hot -= inside

        class Operators(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # False: no torch._dynamo.disable around __torch_dispatch__, whose
                # first call imports torch._dynamo (800 modules, about 0.9 s of
                # every grading's start-up) though nothing here is compiled
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.overloadpacket.__name__
                key = watch.ops.get(name)
                allowed = watch.allowed
                if key is None and allowed is not None:
                    if name not in allowed:
                        key = _OPERATOR + name
                    elif (
                        _leaks(func)
                        and not _runners_own(sys._getframe(1))
                        and not (watch.in_one_hot and _an_id(func, args))
                    ):
                        key = _NUMBERS_OUT  # float(x), bool(x), x[mask]: to NumPy
                    elif "embedding" in watch.keys and not _constant_write(
                        func, args, kwargs
                    ):
                        key = "embedding"  # the table's rows, written by their ids
                    elif _written_outside(func, args, kwargs, watch.made):
                        key = _WRITTEN_OUTSIDE  # memory NumPy may share
                if key is not None:
                    raise watch.hit(key)
                # noted here too: code torch calls back inside the function
                # handler (an __index__) runs with the function mode lifted
                # (the thirty-fifth red team read numbers out of scatter_'s
                # message so)
                out = watch.run(func, args, kwargs)
                if allowed is not None:
                    _note_made(func, args, out, watch.made)
                return out

        return Functions(), Operators()

    def run(self, func, args, kwargs):
        """``func(*args, **kwargs)`` for a mode, noting an error of torch's: if
        the learner's code catches it, it answered a question about the
        numbers (:data:`_CAUGHT`)."""
        try:
            return func(*args, **(kwargs or {}))
        except ForbiddenUse:
            raise
        except Exception:
            self.torch_raised = True
            raise

    def _python_hit(self, frame, event, arg) -> str | None:
        """The forbidden key a profiled call matches, or "escape"."""
        if event == "c_call":
            # Only C getters of C types are read here, never an attribute of
            # the learner's objects: code run inside this hook raises no profile
            # events, so nothing would watch it (the fifty-second red team ran
            # nn.TransformerEncoderLayer in a property of an ndarray subclass
            # that `hasattr(owner, "nin")` read here)
            while type(arg) is functools.partial:  # partial(gc.get_objects)()
                arg = _PARTIAL_FUNC.__get__(arg)
            name, own, owner = _c_function_parts(arg)
            caller = frame
            # a C function's own module, or its object's (tensor.tolist: "torch")
            callee_module = own
            if not callee_module and owner is not None:
                callee_module = _owners_module(type(owner))
            if type(owner) is _UFUNC:
                name = _UFUNC_NAME.__get__(owner)  # np.logaddexp.reduce
            if (
                self.names
                and callee_module in ("_thread", "threading")
                and name in _RAW_THREADS
            ):
                return "escape"  # a thread no hook follows
            if self.names and (
                own.startswith(_COMPILED)
                or (own and own.split(".")[0] not in sys.modules)
            ):  # a compiled kernel (inductor's cpp_fused_..., in a module of its own)
                return "compiled"
        elif event == "call":
            name, caller = frame.f_code.co_name, frame.f_back
            callee_module = dict.get(frame.f_globals, "__name__")
            callee_module = callee_module if type(callee_module) is str else ""
            if (
                self.moded
                and torch._C._len_torch_function_stack() == 0
                and self._learners(frame)
            ):  # called back where torch lifted the function mode: unwatched
                return _UNWATCHED
            if self.names and (
                callee_module.startswith(_COMPILED)
                or dict.__contains__(frame.f_globals, "async_compile")
            ):  # torch.compile's code, or a module inductor generated
                return "compiled"
            if self.names and callee_module == "ctypes":
                return "escape"  # native code, which no watch follows
            for module, qualified, key in _REIMPLEMENTATIONS:
                if (
                    key in self.keys
                    and callee_module.startswith(module)
                    and frame.f_code.co_qualname.startswith(qualified)
                ):
                    return key
            if (
                frame.f_globals is not globals()
                and _is_course(callee_module)
                and frame.f_code not in QUIET_CODE
            ):
                self.course.append(f"{callee_module}.{frame.f_code.co_qualname}")
        else:
            return None
        if (
            self.names
            and event == "c_call"
            and name in PROCESSES
            and callee_module in _PROCESS_MODULES
        ):
            return "escape"  # a process the watch would not follow
        if self.names and callee_module.startswith(_LIBRARIES):
            if name in self.names:
                return self.names[name]
            bare = name.strip("_")
            if callee_module.startswith(_TORCH_PYTHON):
                for prefix, key in self.prefixes.items():
                    if bare.startswith(prefix):
                        return key
            elif not callee_module.startswith("torch"):
                # NumPy, SciPy, scikit-learn: a function whose name holds a
                # forbidden one (scikit-learn's MLP computes its probabilities
                # with inplace_softmax: the twenty-first red team)
                for part, key in self.prefixes.items():
                    if len(part) >= 7 and part in bare:  # not take, split, slice...
                        return key
        if (
            self.names
            and callee_module == "gc"
            and name in _COLLECTOR_SWITCHES
            and caller is not None
            and self._learners(caller)
        ):
            return "escape"  # the collector, off while the function runs
        if name in ESCAPES and caller is not None and self._learners(caller):
            return "escape"  # called by the learner's code itself
        return None

    def _learners(self, frame) -> bool:
        """Whether ``frame`` runs the learner's code: in the learner's namespace,
        or with globals that are no imported module's (code run with exec in a
        dict of its own: the twentieth red team hid its calls so)."""
        if frame.f_globals is self.home or id(frame.f_globals) in _WRITTEN_MODULES:
            return True  # the notebook's, or a module it wrote (%%writefile)
        if frame.f_globals is globals():  # the runner's (a script in the sandbox)
            return False
        if id(frame.f_globals) in _REPLACED_MODULES:  # torch._VF.__getattr__
            return False
        # read without running code of the learner's: a dict subclass's get,
        # an object in sys.modules whose __class__ is a property
        namespace = frame.f_globals
        known = _MODULE_OF_GLOBALS.get(id(namespace))  # an int key: no code runs
        if known is not None and _MODULE_DICT.__get__(known) is namespace:
            return False
        for module in _modules_named(namespace):
            if _MODULE_DICT.__get__(module) is namespace:
                _MODULE_OF_GLOBALS[id(namespace)] = module
                return False
        return True

    @contextlib.contextmanager
    def profiled(self):
        """Watch Python-level calls too, in every thread: torch's Python
        re-implementations of a forbidden function, the course package's code,
        and the calls that would switch the watch off (:data:`ESCAPES`)."""

        def profile(frame, event, arg):
            if frame.f_code is _PROFILED_CODE:  # this method's own exit, below
                return
            key = self._python_hit(frame, event, arg)
            if key is not None:
                # raised from the hook, which unsets it: however the learner's
                # code catches this and whatever it then does to the record of
                # hits, the missing hook is seen once the function has returned
                raise self.hit(key, frame)

        before, before_threads = sys.getprofile(), threading.getprofile()
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            yield
        finally:
            if sys.getprofile() is not profile:  # switched off
                self.hits.append("escape")
            sys.setprofile(before)
            threading.setprofile(before_threads)

    @contextlib.contextmanager
    def kernels(self):
        """Replace the forbidden aten operators' kernels, for every thread, while
        the learner's function runs (a mode only sees its own thread)."""
        if not self.ops:
            yield
            return
        library = torch.library.Library("aten", "IMPL")
        try:
            with warnings.catch_warnings():  # "overriding a registered kernel"
                warnings.simplefilter("ignore")
                for name, key in self.ops.items():
                    if self.allowed is not None and name in _INNER_VIEWS:
                        continue  # see _INNER_VIEWS
                    for overload in getattr(torch.ops.aten, name).overloads():
                        qualified = (
                            name if overload == "default" else f"{name}.{overload}"
                        )
                        for dispatch_key in _kernel_keys(qualified):
                            with contextlib.suppress(RuntimeError):
                                library.impl(
                                    qualified, self._refusal(key), dispatch_key
                                )
            yield
            if library.m is None:  # destroyed from the learner's code
                self.hits.append("escape")
        finally:
            library._destroy()

    def _refusal(self, key: str):
        def refuse(*args, **kwargs):
            raise self.hit(key)

        return refuse


#: Instructions that name a global (or a module imported by name); an
#: attribute's name, ``x.device``, is in ``co_names`` too but names no global.
_GLOBAL_NAME_OPS = frozenset(
    {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL", "IMPORT_NAME"}
)


def _code_names(code: types.CodeType) -> set[str]:
    """Global names a code object uses, the course package's names wherever
    they appear (``__main__.tc`` too), and its string constants
    (``__import__``). Not other attribute names: ``scores.device`` does not read
    a global ``device`` (pass 14 of the red team: honest answers failed)."""
    names = {
        instruction.argval
        for instruction in dis.get_instructions(code)
        if instruction.opname in _GLOBAL_NAME_OPS
        and isinstance(instruction.argval, str)
    }
    names |= set(code.co_names) & {"tc", COURSE_PACKAGE}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
        elif isinstance(const, str) and const.split(".")[0] == COURSE_PACKAGE:
            names.add(COURSE_PACKAGE)
    return names


def _unwrap(obj: object) -> list:
    """The callables behind ``obj``: itself, a partial's function, a bound
    method's function, a decorator's ``__wrapped__``, an instance's ``__call__``."""
    found, todo = [], [obj]
    while todo and len(found) < 50:
        item = todo.pop()
        if any(item is f for f in found):
            continue
        found.append(item)
        for attribute in ("func", "__func__", "__wrapped__"):
            try:
                inner = getattr(item, attribute)
            except Exception:
                continue
            if isinstance(inner, staticmethod | classmethod):
                inner = inner.__func__
            if callable(inner):
                todo.append(inner)
        if not isinstance(item, types.FunctionType | types.BuiltinFunctionType):
            call = getattr(type(item), "__call__", None)  # noqa: B004
            if isinstance(call, types.FunctionType):
                todo.append(call)
    return found


def _learner_namespace(function: object) -> dict | None:
    """The namespace the learner's code runs in: the globals of the functions
    behind ``function`` that belong to ``__main__`` (a notebook's, the
    grader's shell), not to a library decorator wrapped around them."""
    functions = [f for f in _unwrap(function) if isinstance(f, types.FunctionType)]
    mains = [f for f in functions if f.__globals__.get("__name__") == "__main__"]
    chosen = mains or functions
    return chosen[0].__globals__ if chosen else None


def _from_course(obj: object) -> bool:
    """True for the course package, its modules, and anything defined in them."""
    try:
        if isinstance(obj, types.ModuleType):
            name = obj.__name__
        else:
            name = getattr(obj, "__module__", None) or type(obj).__module__
    except Exception:
        return False
    return isinstance(name, str) and name.split(".")[0] == COURSE_PACKAGE


#: Names the grader's preamble binds the way the notebook's setup cell does
#: with the course package (``device = tc.setup(seed=0)``); tests/test_grade.py
#: keeps this in step with grade.PREAMBLE.
PROVIDED_WHEN_GRADING = frozenset({"device"})

#: Course code that runs inside a watched call without the learner calling it:
#: the notebook's check timer (:func:`.core.deadline`), whose signal handler the
#: profile hook sees. Not a use of the course package (the eighteenth red team:
#: a bare ``except:`` that swallowed the timeout read as one).
QUIET_CODE: set = set()

#: Set by the notebook's check timer once its time is up: :func:`call_cases`
#: makes no further call (a function whose own ``except:`` swallows each
#: timeout would otherwise run on through every case).
STOP_CALLS: list = []


def _computed_with_the_course(namespace: dict) -> set[str]:
    """Names the notebook's cells bound, at their top level, with a statement
    that reads the course package (``ALLOWED = tc.causal_mask(64, 64)``), or a
    name imported from it, or a name already so computed (``ALLOWED =
    MASK.bool()``), read from the kernel's input history (``In``), the bodies
    of ``%%time``, ``%%capture`` and ``%%prun`` included; a later statement
    that binds the name without them clears it. The grader's sandbox passes such
    statements over (:func:`_run_cell`, the same rule), so there these names do
    not exist: a function that reads one passed in the notebook and failed when
    graded (the thirteenth and eighteenth red teams). Outside a kernel there is
    no history: nothing."""
    history = namespace.get("In")
    if not isinstance(history, list):
        return set()
    course, tainted = {"tc", COURSE_PACKAGE}, set()

    def visit(source: str, depth: int = 0) -> None:
        nonlocal course, tainted
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return
        for statement in tree.body:
            magic = _pass_through_magic(statement)
            if magic is not None and depth < 8:  # the body, as the grader runs it
                visit(magic[2], depth + 1)
                continue
            bound = _binds(statement)
            if isinstance(statement, ast.Import | ast.ImportFrom):
                imported = _reads(statement, set())  # the course package's names
                course = (course | bound) if imported else (course - bound)
                tainted -= bound
            elif _reads(statement, course | tainted):
                tainted |= bound  # passed over when graded: unbound there
            else:  # a def, or a value made without the package
                tainted -= bound
                course -= bound

    for source in history:
        if isinstance(source, str) and source.strip():
            visit(source)
    # the grader binds these itself (grade.PREAMBLE: ``device`` on the CPU), so
    # a function that reads them runs there too (the fifteenth red team)
    return tainted - PROVIDED_WHEN_GRADING


def uses_course_package(function: Callable) -> list[str]:
    """The names through which ``function`` reaches the course package.

    Looks through partials, bound methods, decorators and callable instances,
    and follows the learner's own helpers (functions defined in the same
    namespace, ``__main__``; library code is not read). ``tc``
    counts even where it is not defined (in the grader's sandbox).
    """
    found: list[str] = []
    seen: set[int] = set()
    learner = _learner_namespace(function)
    home: list[dict] = [] if learner is None else [learner]  # the learner's namespace
    computed: list[set[str]] = []  # names bound with tc (see above), once

    def visit(obj: object) -> None:
        for fn in _unwrap(obj):
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            if _from_course(fn):
                found.append(getattr(fn, "__qualname__", None) or type(fn).__name__)
                continue
            code = getattr(fn, "__code__", None)
            namespace = getattr(fn, "__globals__", None)
            if not isinstance(code, types.CodeType) or not isinstance(namespace, dict):
                continue
            if not home:
                home.append(namespace)
            elif namespace is not home[0]:
                continue  # library code
            if not computed:
                computed.append(_computed_with_the_course(namespace))
            for name in sorted(_code_names(code)):
                if name in (COURSE_PACKAGE, "tc") and name not in namespace:
                    found.append(name)
                elif name in computed[0]:
                    found.append(f"{name}, computed with tc in a cell")
                elif name in namespace:
                    value = namespace[name]
                    if _from_course(value):
                        found.append(name)
                    elif callable(value) and not isinstance(value, types.ModuleType):
                        visit(value)

    visit(function)
    return sorted(set(found))


# --- plain values ---------------------------------------------------------------------


class _TooLarge(Exception):  # noqa: N818
    pass


def to_plain(value: Any, limits: dict | None = None) -> Any:
    """A value made of plain tensors, numbers, strings, lists, tuples and dicts.

    Tensor subclasses become plain tensors (detached, on the CPU), number and
    string subclasses their plain type; other objects become a description string
    such as ``"<ndarray>"``, which the judges reject with a hint. Raises
    ``_TooLarge`` past the :data:`LIMITS` (checked before anything is copied).
    """
    limits = {**LIMITS, **(limits or {})}
    budget = {"elements": limits["elements"], "items": limits["items"]}

    def spend(kind: str, amount: int, what: str) -> None:
        budget[kind] -= amount
        if budget[kind] < 0:
            raise _TooLarge(
                f"{what}: more than the {limits[kind]:,} {kind} a result may hold"
            )

    def plain(v: Any, depth: int) -> Any:
        if depth > limits["depth"]:
            raise _TooLarge(f"a value nested more than {limits['depth']} levels deep")
        if v is None or type(v) in (bool, int, float, str):
            if isinstance(v, str) and len(v) > limits["string"]:
                raise _TooLarge(f"a string of {len(v):,} characters")
            return v
        if isinstance(v, torch.Tensor):
            t = _plain_tensor(v)
            # the non-zero sizes too: (1000, 1000, 1000, 0) is empty, but a
            # judge's t.sum(-1) of it is not
            size = max(t.numel(), math.prod(n for n in t.shape if n))
            spend("elements", size, f"a tensor of shape {tuple(t.shape)}")
            t = t.detach()
            if t.layout != torch.strided:
                t = t.to_dense()
            return t.cpu().clone()
        for kind in (bool, int, float):
            if isinstance(v, kind):
                return kind(v)
        if type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0:
            with contextlib.suppress(Exception):  # a NumPy scalar: its Python value
                return plain(v.item(), depth)
        if isinstance(v, str):
            return plain(str.__str__(v), depth)
        if isinstance(v, list | tuple | dict):
            spend("items", len(v), f"a {type(v).__name__} of {len(v):,} items")
        if isinstance(v, list | tuple):
            items = [plain(x, depth + 1) for x in v]
            return items if isinstance(v, list) else tuple(items)
        if isinstance(v, dict):
            return {_plain_key(k): plain(x, depth + 1) for k, x in list(dict.items(v))}
        return f"<{_name_of(type(v))}>"

    return plain(value, 0)


def _plain_tensor(v: torch.Tensor) -> torch.Tensor:
    """``v`` as a plain ``torch.Tensor``, through torch's own method: a learner's
    subclass can override ``as_subclass`` (and answer every ``allclose`` with
    True), not the C method underneath it. Raises TypeError for a non-tensor."""
    if type(v) is torch.Tensor:  # type() cannot be faked: plain already
        return v
    t = torch._C.TensorBase.as_subclass(v, torch.Tensor)
    if type(t) is not torch.Tensor:
        raise TypeError(f"could not make a plain tensor of a {type(v).__name__}")
    return t


def _plain_key(key: Any) -> Any:
    if key is None or type(key) in (bool, int, float, str):
        return key
    if tuple in _CLASS_MRO.__get__(type(key)) and all(
        type(k) in (bool, int, float, str) for k in tuple.__iter__(key)
    ):
        return tuple(tuple.__iter__(key))  # a plain tuple: no method of a subclass's
    return f"<{_name_of(type(key))}>"


# --- the results' way out of the sandbox: a strict format ---------------------------
#
# What crosses from the sandbox to the grader is untrusted: the learner's code ran
# in the process that wrote it and may have written anything. So it is not a
# pickle (a few hundred bytes of shared sub-lists unfold into 10⁸ leaves the
# first time anything walks them) but JSON, which cannot share, for the
# structure, and the tensors' raw bytes after it:
#
#     8 bytes: n, the length of the JSON text (big-endian)
#     n bytes: the JSON text: null, true/false, numbers, strings, and objects with
#              one key: {"list": [...]}, {"tuple": [...]}, {"dict": [[k, v], ...]},
#              {"tensor": [dtype, shape, offset, nbytes]}
#     the rest: the tensors' bytes, at their offsets
#
# :func:`decode_result` checks every type and size against :data:`WIRE_LIMITS`
# before it uses or builds anything.

#: The tensor types a result may hold, by name.
WIRE_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
    )
}
#: Bounds on a decoded result (a whole job: every call of every check).
WIRE_LIMITS = {
    "structure_bytes": 2 * 2**20,  # the JSON text
    "data_bytes": 8 * 2**20,  # the tensors' bytes (the checks' results: a few KB)
    "items": 200_000,  # list, tuple and dict entries, and values, in all
    "depth": LIMITS["depth"] + 8,  # a value's own nesting, and the result's around it
    "string": LIMITS["string"],
    "dimensions": 16,
    "elements": 2 * LIMITS["elements"],  # tensor elements, in all
}


class WireError(ValueError):
    """A result that does not follow the format, or is past its limits."""


#: What :func:`encode_result` calls, taken when the runner is imported: the C
#: methods of tensors (their class cannot be changed from Python) and json's
#: encoder, so that no attribute a cell set on ``torch.Tensor`` or ``json``
#: runs as the results leave.
_BASE = torch._C.TensorBase
_DUMPS = json.dumps


def encode_result(result: Any) -> bytes:
    """``result`` (plain data, see :func:`to_plain`) in the format above."""
    data = bytearray()

    def encode(v: Any) -> Any:
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is torch.Tensor:
            t = _BASE.contiguous(_BASE.cpu(_BASE.detach(v)))
            name = str(_BASE.dtype.__get__(t)).removeprefix("torch.")
            if name not in WIRE_DTYPES:
                return f"<tensor of {name}>"
            flat = _BASE.view(_BASE.reshape(t, (-1,)), torch.uint8)
            raw = _BASE.numpy(flat).tobytes() if _BASE.numel(t) else b""
            offset = len(data)
            data.extend(raw)
            return {"tensor": [name, list(_BASE.shape.__get__(t)), offset, len(raw)]}
        if type(v) is list:
            return {"list": [encode(x) for x in v]}
        if type(v) is tuple:
            return {"tuple": [encode(x) for x in v]}
        if type(v) is dict:
            return {"dict": [[encode(k), encode(x)] for k, x in v.items()]}
        return f"<{_name_of(type(v))}>"

    text = _DUMPS(encode(result), separators=(",", ":")).encode()
    return len(text).to_bytes(8, "big") + text + bytes(data)


def decode_result(payload: bytes, limits: dict | None = None) -> Any:
    """A result from :func:`encode_result`'s format, every type and size checked
    first: time and memory stay in proportion to ``len(payload)``, whatever it
    holds. Raises :class:`WireError` for anything else."""
    limits = {**WIRE_LIMITS, **(limits or {})}
    if not isinstance(payload, bytes | bytearray) or len(payload) < 8:
        raise WireError("the result is not in the grader's format")
    size = int.from_bytes(payload[:8], "big")
    if size > limits["structure_bytes"] or 8 + size > len(payload):
        raise WireError(f"a result structure of {size:,} bytes")
    data = memoryview(payload)[8 + size :]
    if len(data) > limits["data_bytes"]:
        raise WireError(f"{len(data):,} bytes of tensor data")
    try:
        structure = json.loads(payload[8 : 8 + size])
    except (ValueError, RecursionError) as err:
        raise WireError(
            f"the result structure is not JSON ({type(err).__name__})"
        ) from None
    items = [limits["items"]]
    budget = {"elements": limits["elements"], "end": 0}

    def count(n: int) -> None:
        items[0] -= n
        if items[0] < 0:
            raise WireError(f"more than {limits['items']:,} items in the result")

    def decode(v: Any, depth: int) -> Any:
        count(1)
        if depth > limits["depth"]:
            raise WireError(f"a result nested more than {limits['depth']} levels")
        if v is None or type(v) in (bool, int, float):
            return v
        if type(v) is str:
            if len(v) > limits["string"]:
                raise WireError(f"a string of {len(v):,} characters")
            return v
        if type(v) is not dict or len(v) != 1:
            raise WireError(f"an unexpected {type(v).__name__} in the result")
        ((tag, body),) = v.items()
        if tag in ("list", "tuple", "dict") and type(body) is not list:
            raise WireError(f"a {tag} that is not a list")
        if tag == "list":
            count(len(body))
            return [decode(x, depth + 1) for x in body]
        if tag == "tuple":
            count(len(body))
            return tuple(decode(x, depth + 1) for x in body)
        if tag == "dict":
            count(len(body))
            if not all(type(pair) is list and len(pair) == 2 for pair in body):
                raise WireError("a dict entry that is not a [key, value] pair")
            keys = [decode(key, depth + 1) for key, _ in body]
            try:
                hashes = {hash(key) for key in keys}  # a set of ints: never collides
            except TypeError:  # a list or dict, also inside a tuple key
                raise WireError("a dict key that cannot be a key") from None
            if len(keys) - len(hashes) > 64 + len(keys) // 64:
                # keys made to share a hash (integers i·(2⁶¹ − 1), say) make
                # building the dict quadratic: 66,000 of them cost the grader
                # 29 s (the fourteenth red team), and half of them sharing one
                # still 7 s (the fifteenth); honest keys share one by chance
                # only (hash(-1) == hash(-2)), a few in a dict at most
                raise WireError("a dict whose keys share their hashes")
            return {
                key: decode(value, depth + 1)
                for key, (_, value) in zip(keys, body, strict=True)
            }
        if tag == "tensor":
            return tensor(body)
        raise WireError(f"an unknown tag {str(tag)[:40]!r} in the result")

    def tensor(body: Any) -> torch.Tensor:
        if not (type(body) is list and len(body) == 4):
            raise WireError("a tensor entry that is not [dtype, shape, offset, nbytes]")
        name, shape, offset, nbytes = body
        if type(name) is not str or name not in WIRE_DTYPES:
            raise WireError(f"a tensor of an unknown type {str(name)[:40]!r}")
        if (
            type(shape) is not list
            or len(shape) > limits["dimensions"]
            or not all(type(n) is int and 0 <= n <= len(payload) for n in shape)
        ):
            raise WireError("a tensor shape that is not a short list of sizes")
        dtype = WIRE_DTYPES[name]
        numel = math.prod(shape)
        # the non-zero sizes of an empty tensor count (a judge may reduce over
        # them); and tensors lie one after the other in the data, as
        # encode_result writes them: none shares bytes with another, so what is
        # built is never more than what was sent
        budget["elements"] -= max(numel, math.prod(n for n in shape if n))
        if budget["elements"] < 0:
            raise WireError("more tensor elements than a result may hold")
        if offset != budget["end"]:
            raise WireError("a tensor's data overlaps another's or leaves a gap")
        budget["end"] += nbytes
        if not (type(offset) is int and type(nbytes) is int and offset >= 0):
            raise WireError("a tensor's place in the data is not two numbers")
        if nbytes != numel * dtype.itemsize or offset + nbytes > len(data):
            raise WireError(f"a tensor of shape {tuple(shape)} without its data")
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        raw = torch.frombuffer(
            bytearray(data[offset : offset + nbytes]), dtype=torch.uint8
        )
        return raw.view(dtype).reshape(shape)

    return decode(structure, 0)


# --- calling ------------------------------------------------------------------------


#: Dictionary keys compared without running anyone's code.
_PLAIN_KEYS = (str, int, float, bool, type(None))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if type(a) is not type(b):  # an input turned into a subclass: changed
            return False
        a, b = _plain_tensor(a), _plain_tensor(b)
        # torch's functions, not the tensors' methods: an attribute set on the
        # learner's tensor could stand in for a method
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if torch.equal(a, b):  # one call where nothing changed (each costs a watch)
            return True
        if torch.is_floating_point(a) or torch.is_complex(a):
            return bool(torch.all(torch.eq(a, b) | (torch.isnan(a) & torch.isnan(b))))
        return False
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        if type(a) is not type(b) or any(type(k) not in _PLAIN_KEYS for k in a):
            return False  # a key of the learner's (its __hash__ and __eq__ are code)
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _cut(text: str, limit: int = 500) -> str:
    """``text``, at most ``limit`` characters long, with "…" where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


_TYPE_NAME = type.__dict__["__name__"]
_TRACEBACK = BaseException.__dict__["__traceback__"]


def _exact_str(text: object) -> str:
    """A plain ``str`` of ``text``: a str subclass's characters copied, without
    its methods (``str.__str__`` runs none of them), "" for anything else. What
    the runner keeps of the learner's text past the watch must be this: a
    subclass's ``__add__`` or ``__str__``, used after the watch is lifted, ran
    there unwatched (the fifty-third red team started a helper thread so)."""
    return str.__str__(text) if str in _CLASS_MRO.__get__(type(text)) else ""


def _name_of(kind: type) -> str:
    """``kind.__name__`` through type's own getter (a metaclass's property on
    ``__name__`` does not run), a plain str."""
    return _exact_str(_TYPE_NAME.__get__(kind))[:100]


def _where_raised(err: BaseException, code: object) -> str:
    """Where in the learner's own code ``err`` was raised, as " (line 3 of
    attend: scores = q @ k.T)" (counting the ``def`` as line 1), or "": the
    innermost line of the traceback that lies in a cell (the function's own,
    or another the kernel ran, whose lines the kernel keeps in ``linecache``).
    Only plain lists and strings of the cache are read, no learner code runs."""
    trace = _TRACEBACK.__get__(err)
    own_file = code.co_filename if type(code) is types.CodeType else None
    found = None
    while type(trace) is types.TracebackType:
        frame_code = trace.tb_frame.f_code
        cache = linecache.cache  # a plain dict, read with dict's own get
        entry = dict.get(cache, frame_code.co_filename) if type(cache) is dict else None
        cell = (
            type(entry) is tuple
            and len(entry) == 4
            and entry[1] is None  # kept by IPython (or the runner), not a file
            and type(entry[2]) is list
        )
        if cell or frame_code.co_filename == own_file:
            found = (frame_code, trace.tb_lineno, entry[2] if cell else [])
        trace = trace.tb_next
    if found is None or not isinstance(found[1], int):
        return ""
    frame_code, line, lines = found
    text = lines[line - 1] if 0 < line <= len(lines) else None
    text = _cut(text.strip(), 120) if type(text) is str else ""
    if frame_code.co_name == "<module>":
        where = f"line {line} of its cell"
    else:
        where = f"line {line - frame_code.co_firstlineno + 1} of {frame_code.co_name}"
    return f" ({where}: {text})" if text else f" ({where})"


def _message(error: BaseException) -> str:
    """``str(error)`` as a plain str (:func:`_exact_str`), or a stand-in when
    the learner's ``__str__`` fails or gives no str."""
    try:
        said = str(error)
    except Exception:
        said = None
    if str not in _CLASS_MRO.__get__(type(said)):
        return f"<{_name_of(type(error))} that cannot be printed>"
    return _cut(_exact_str(said))


def _same_or_unreadable(a: Any, b: Any) -> bool:
    """:func:`_same`, where a value it cannot compare counts as changed."""
    try:
        return _same(a, b)
    except Exception:
        return False


def _outcome(
    value=None, error=None, message="", mutated=(), kinds=(), value_type=None
) -> dict:
    return {
        "value": value,
        "error": error,
        "message": _message(message)
        if isinstance(message, BaseException)
        else _cut(str(message)),
        "mutated": list(mutated),
        "kinds": list(kinds),  # the exception's classes, its own first
        "value_type": value_type,  # the returned value's type, by name
    }


def _error_kinds(error: BaseException) -> list[str]:
    """The names of ``error``'s classes up to ``Exception``: a learner's
    ``class ShapeError(ValueError)`` still raised a ValueError."""
    kinds = []
    for kind in _CLASS_MRO.__get__(type(error)):
        if kind is BaseException or kind is object:
            break
        kinds.append(_name_of(kind))
    return kinds[:20]


def call_cases(
    function: Callable,
    cases: Sequence[tuple],
    forbidden: Sequence[str] = (),
    limits: dict | None = None,
) -> list[dict]:
    """Call ``function(*case)`` for every case; one outcome dict per case.

    An outcome has ``value`` (plain data, see :func:`to_plain`), ``error`` (the
    exception's class name, or ``"ForbiddenUse"``, ``"CoursePackageUsed"``,
    ``"ResultTooLarge"``, ``"NotAttempted"``: the function's own ``raise
    NotImplementedError``, the stub), ``message`` and ``mutated`` (indices of the arguments
    the call changed in place). Inputs are deep-copied before every call.
    """
    if not forbidden:
        return _call_cases(function, cases, forbidden, limits)
    # Python's cyclic collector runs finalizers (a generator's finally) at any
    # allocation, also inside the watch's own handlers, where torch has taken
    # the watch's modes off its stack: code run there is not watched (the
    # thirty-fourth red team looked a row up so). Off while the learner's code
    # runs; what it left to collect is collected at the end, under the watch:
    # every generation, since a cycle made before the call and let go during it
    # sits in an older one (the fifty-first red team's finally ran after the
    # call). The objects alive at the first such call (the libraries, mostly)
    # are frozen once, so that a full collection reads only what came later.
    _freeze_once()
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _call_cases(function, cases, forbidden, limits)
    finally:
        if collecting:
            gc.enable()


_FROZEN: list[bool] = []


def _freeze_once() -> None:
    """Move the objects alive now to the collector's permanent generation
    (``gc.freeze``), once per process: a full collection then takes about 0.5 ms
    instead of 100 ms with torch loaded. What is frozen is never collected, so
    nothing frozen can run a finalizer inside or after a call."""
    if not _FROZEN:
        gc.collect()
        gc.freeze()
        _FROZEN.append(True)


def _call_cases(function, cases, forbidden, limits) -> list[dict]:
    """:func:`call_cases`, its collector off where something is forbidden."""
    if not _intact():  # the runner patched from a cell: its verdicts would lie
        message = forbidden_message("escape")
        return [_outcome(error="ForbiddenUse", message=message) for _ in cases]
    watch = _Watch(forbidden)
    home = stub_code = None
    course: list[str] = []
    with _watched_step(watch, forbidden):
        # reading the function runs the learner's code (a property, an ``In``
        # of its own): watched, like the call (the twenty-third red team
        # started an unwatched thread there)
        course = uses_course_package(function)
        home = _learner_namespace(function)
        stub_code = getattr(function, "__code__", None)
    if watch.hits:
        message = forbidden_message(watch.hits[0])
        return [_outcome(error="ForbiddenUse", message=message) for _ in cases]
    if course:
        message = (
            f"your solution uses the course package ({', '.join(course)}), which holds "
            "the answers and is hidden when grading: write it with torch only"
        )
        return [_outcome(error="CoursePackageUsed", message=message) for _ in cases]
    watch.home = home
    outcomes = []
    # every case's inputs, value and error, freed at the end under the watch:
    # freeing runs the learner's code (a generator's finally hung on an input:
    # the twenty-fourth red team)
    kept: list = []
    for case in cases:
        if STOP_CALLS:  # the notebook's time is up (core.deadline): no more calls
            break
        pristine = _copied(tuple(case))
        args = _copied(pristine)
        kept.append((pristine, args))
        watch.hits.clear()
        watch.course.clear()
        watch.torch_raised, watch.in_one_hot = False, 0
        tables = watch.tables()  # held here, out of the watch's reach
        error = unreadable = None
        said, kinds, error_name, stub_raised, mutated = "", [], "", False, []
        try:
            with _watching(watch, forbidden):
                # its inputs (fresh copies); the last case's tensors let go here,
                # under the watch (a finalizer of the learner's on one runs)
                watch.made = _storages(args)
                try:
                    value = function(*args)
                    if watch.torch_raised and _CAUGHT not in watch.hits:
                        watch.hits.append(_CAUGHT)  # and it returned: caught
                except BaseException as err:
                    # the learner's __str__ runs here: watched too (the
                    # twenty-third red team started a thread from one); what
                    # is kept of it, plain strings only
                    said, kinds = _message(err), _error_kinds(err)
                    error_name = _name_of(type(err))
                    stub_raised = isinstance(
                        err, NotImplementedError
                    ) and _raised_by_the_stub(err, stub_code)
                    raise
                # the result read at once, still under the watch: code of the
                # learner's that runs once the watch is lifted (a hook, a
                # warning filter) cannot fill in a blank the function returned
                # (the fiftieth red team did, with torch.softmax)
                value_type = _name_of(type(value))
                try:
                    plain, unreadable = to_plain(value, limits), None
                except Exception as err:  # _TooLarge, or a value with no data
                    plain, unreadable = None, err
                    unreadable_said = _message(err)  # watched, as above
                # Comparing the inputs can run the learner's code (a method set
                # on an input tensor, a dict key's __hash__: the twenty-first red
                # team computed the forbidden function there, after the call):
                # in the same watch, and an error there is the watch's
                try:
                    mutated = [
                        i
                        for i, (a, b) in enumerate(zip(args, pristine, strict=True))
                        if not _same_or_unreadable(a, b)
                    ]
                except Exception:
                    if not watch.hits:
                        watch.hits.append("escape")
        except NotImplementedError as err:
            if not (watch.hits or watch.course) and stub_raised:
                outcomes.append(_outcome(error=NOT_ATTEMPTED, message=said))
                kept.append(err)  # its traceback holds the call's frames
                continue
            error = err  # from inside torch or a helper: the learner's bug
        except Exception as err:  # the learner's bug, reported as a hint
            error = err
        kept.append((error, value if error is None else None))
        if watch.tables() != tables:  # the learner's code emptied the watch
            watch.hits.insert(0, "escape")
        if watch.course:  # reached at run time (``__import__`` of a computed name)
            message = (
                f"your solution uses the course package ({watch.course[0]}), which "
                "holds the answers and is hidden when grading: write it with torch only"
            )
            outcomes.append(_outcome(error="CoursePackageUsed", message=message))
            continue
        if watch.hits:  # called (and perhaps caught by the learner): forbidden
            message = forbidden_message(watch.hits[0])
            outcomes.append(_outcome(error="ForbiddenUse", message=message))
            continue
        if error is not None:
            where = _where_raised(error, stub_code)
            outcomes.append(
                _outcome(
                    error=error_name or _name_of(type(error)),
                    message=(_cut(said, 350) + where) if where else said,
                    kinds=kinds,
                )
            )
            continue
        if type(unreadable) is _TooLarge:  # no isinstance: a __class__ of the
            # learner's exception would run here, unwatched (the fifty-fifth red team)
            outcomes.append(
                _outcome(
                    error="ResultTooLarge",
                    message=f"your function returned {unreadable_said}",
                    mutated=mutated,
                )
            )
            continue
        if unreadable is not None:  # e.g. a tensor on the "meta" device: no data
            message = (
                f"your function returned a {value_type} that cannot be read "
                f"({_name_of(type(unreadable))}: {unreadable_said})"
            )
            outcomes.append(
                _outcome(error="UnreadableResult", message=message, mutated=mutated)
            )
            continue
        outcomes.append(_outcome(value=plain, mutated=mutated, value_type=value_type))
    watch.hits.clear()
    with _watched_step(watch, forbidden):
        kept.clear()
        # freed here, watched (an error kept as unreadable too: a generator
        # in its traceback would run its finally: the fifty-fourth red team)
        pristine = args = value = error = unreadable = None
        watch.made = {}
        if forbidden:
            gc.collect()  # every cycle the calls let go, also older ones
    if watch.hits:
        message = forbidden_message(watch.hits[0])
        return [_outcome(error="ForbiddenUse", message=message) for _ in outcomes]
    return outcomes


@contextlib.contextmanager
def _watching(watch: _Watch, forbidden: Sequence[str]):
    """The watch on: the profile hook always; where something is forbidden, the
    function and dispatch modes and the forbidden operators' kernels too. A
    warning filter of the learner's left by the call is taken out before the
    watch is lifted (see :func:`_plain_filters`)."""
    if forbidden:
        functions, operators = watch.modes()
        watch.classes = _class_snapshot()
        with watch.kernels(), functions, operators, watch.profiled():
            watch.moded = True
            try:
                yield
            finally:
                if not _plain_filters():
                    watch.hits.append("escape")
                    _drop_filters()
                watch.moded = False
    else:
        with watch.profiled():
            yield


@contextlib.contextmanager
def _watched_step(watch: _Watch, forbidden: Sequence[str]):
    """Learner code the runner runs besides the call (reading the function,
    comparing the inputs, reading the value, letting them go), under the watch:
    an exception from it, the watch's refusal or the learner's object failing
    to be read, is recorded as a hit ("escape" unless the watch named one)."""
    try:
        with _watching(watch, forbidden):
            yield
    except Exception:
        if not watch.hits:
            watch.hits.append("escape")


def _raised_by_the_stub(err: NotImplementedError, code) -> bool:
    """Whether the function's own code (``code``, its ``__code__``) raised
    ``err``, as the stub does ("not attempted"); one raised deeper down (a
    torch function not implemented on this device, an earlier exercise still a
    stub) is reported as an error."""
    innermost = _TRACEBACK.__get__(err)
    if code is None or innermost is None:
        return True
    while innermost.tb_next is not None:
        innermost = innermost.tb_next
    return innermost.tb_frame.f_code is code


#: What the watch and the in-place check rely on outside this module: each
#: attribute of these objects (as the runner found it) must still be the same
#: object when a learner's function is called. The thirteenth red team switched
#: the watch off by patching torch's mode classes and its Library, and hid an
#: in-place change by replacing copy.deepcopy.
def _relied_on() -> dict[str, object]:
    from torch import _weights_only_unpickler, serialization
    from torch.utils import _python_dispatch

    owners = {  # every callable attribute of these
        "torch.overrides": torch.overrides,
        "torch.utils._python_dispatch": _python_dispatch,
        "torch.library": torch.library,
        "TorchFunctionMode": TorchFunctionMode,
        "TorchDispatchMode": TorchDispatchMode,
        "Library": torch.library.Library,
        "torch.Tensor": torch.Tensor,
        "TensorBase": torch._C.TensorBase,
        # what copy.deepcopy of the inputs calls (Tensor.__deepcopy__)
        "UntypedStorage": torch.UntypedStorage,
        "TypedStorage": torch.storage.TypedStorage,
        "Parameter": torch.nn.Parameter,
        # how the watch finds the forbidden operators' overloads (a packet's
        # overloads() patched to none left the kernels unreplaced: the
        # twenty-eighth red team)
        "OpOverloadPacket": torch._ops.OpOverloadPacket,
        "OpOverload": torch._ops.OpOverload,
        # what reads the checks' cases in the child, after the cells
        "torch.serialization": serialization,
        "torch._weights_only_unpickler": _weights_only_unpickler,
    }
    found = {}
    for owner_name, owner in owners.items():
        for name, value in list(vars(owner).items()):
            if callable(value) or isinstance(value, staticmethod | classmethod):
                found[f"{owner_name}.{name}"] = value
    # of these, only what the runner uses: a kernel rebinds others as it runs
    # (ipykernel sets builtins.input and sys.displayhook for each cell)
    for owner, names in (
        (copy, ("deepcopy", "copy")),
        (sys, ("setprofile", "getprofile", "settrace", "gettrace")),
        (threading, ("setprofile", "getprofile")),
        (functools, ("partial",)),
        (gc, ("disable", "enable", "isenabled", "collect")),
        (torch, ("equal", "isnan", "is_floating_point", "is_complex")),
    ):
        for name in names:
            found[f"{owner.__name__}.{name}"] = getattr(owner, name)
    for name in dir(torch._C):  # the mode stacks and the dispatcher
        if any(part in name for part in ("torch_function", "dispatch", "_mode")):
            found[f"torch._C.{name}"] = getattr(torch._C, name)
    return found


def _snapshot() -> dict:
    """What the watch is made of: this module's functions and classes, and the
    classes' attributes (a learner's cell that patches them shows up)."""
    found = {}
    for name, value in list(globals().items()):
        if isinstance(value, types.FunctionType | type) and not name.startswith("__"):
            found[name] = value
            if isinstance(value, type) and value.__module__ == __name__:
                for attribute, inner in list(vars(value).items()):
                    found[f"{name}.{attribute}"] = inner
    return found


def _made_of(value: object) -> tuple:
    """What a function (or a class attribute that wraps one: a static or class
    method, a property, a decorator's ``__wrapped__``) runs: its code,
    defaults and closure's values. A cell can swap these while the function
    object stays the same one (the forty-fifth red team gave the runner's
    ``_watching`` the code of a generator that yields at once), which an
    identity check alone does not see."""
    functions, todo = [], [value]
    while todo and len(functions) < 8:
        item = todo.pop()
        if isinstance(item, staticmethod | classmethod):
            todo.append(item.__func__)
        elif isinstance(item, property):
            todo += [f for f in (item.fget, item.fset, item.fdel) if f is not None]
        elif isinstance(item, types.FunctionType):
            functions.append(item)
            wrapped = item.__dict__.get("__wrapped__")
            if wrapped is not None:
                todo.append(wrapped)
    made = []
    for function in functions:
        cells = []
        for cell in function.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # an empty cell
                cells.append(_MISSING)
        # ... and the module globals its code reads, by identity: a cell that
        # rebinds one (copy._keep_alive, which deepcopy of the inputs calls
        # before the watch: the forty-eighth red team, through
        # enum.global_enum) changes what the function does. All of this
        # module's, which never rebinds its own; of a library's, the code it
        # calls (functions, classes, modules), not the state it keeps and
        # rebinds as it runs (torch.serialization's set of safe globals)
        namespace = function.__globals__
        own = namespace is globals()
        for name in _names_read(function.__code__):
            value = namespace.get(name, _MISSING)
            if (own and not name.startswith(_RECORDS)) or (
                not own and (callable(value) or isinstance(value, types.ModuleType))
            ):
                cells.append(value)
        made.append(
            (function.__code__, function.__defaults__, function.__kwdefaults__, cells)
        )
    return tuple(made)


#: The runner's own records of itself (:data:`_PRISTINE` and the others),
#: bound after they are taken, so left out of the globals a function reads.
_RECORDS = "_PRISTINE"


@functools.cache
def _names_read(code: types.CodeType) -> tuple[str, ...]:
    """The names ``code`` and the code nested in it read (globals among
    them; attribute names too, which a module's globals may not hold)."""
    names, todo = set(), [code]
    while todo:
        inner = todo.pop()
        names.update(inner.co_names)
        todo += [c for c in inner.co_consts if isinstance(c, types.CodeType)]
    return tuple(sorted(names))


def _same_made(a: tuple, b: tuple) -> bool:
    """Whether two :func:`_made_of` records hold the same objects."""
    if len(a) != len(b):
        return False
    for (code_a, defaults_a, kw_a, cells_a), (code_b, defaults_b, kw_b, cells_b) in zip(
        a, b, strict=True
    ):
        if code_a is not code_b or len(cells_a) != len(cells_b):
            return False
        if (defaults_a is None) != (defaults_b is None) or (kw_a is None) != (
            kw_b is None
        ):
            return False
        pairs = [
            *zip(defaults_a or (), defaults_b or (), strict=False),
            *zip(cells_a, cells_b, strict=True),
        ]
        if len(defaults_a or ()) != len(defaults_b or ()):
            return False
        if kw_a is not None and (
            kw_a.keys() != kw_b.keys() or any(kw_a[k] is not kw_b[k] for k in kw_a)
        ):
            return False
        if any(x is not y for x, y in pairs):
            return False
    return True


_PATTERN = type(re.compile(""))


def _plain_filters() -> bool:
    """Whether every entry of ``warnings.filters`` is made of plain values (an
    action string, patterns or strings, a class, a line number). A warning, the
    runner's own included (torch warns as the watch replaces its kernels),
    compares each entry with what it matches, which runs the methods of an
    object of the learner's there (``__eq__`` of a ``str`` subclass, a
    pattern's ``match``) where nothing watches: the fiftieth red team filled
    a blank result so with torch.softmax, after the call and before it was
    read."""
    filters = warnings.filters
    if type(filters) is not list:
        return False
    for entry in filters:
        if type(entry) is not tuple or len(entry) != 5:
            return False
        action, message, category, module, line = entry
        if type(action) is not str or type(line) is not int:
            return False
        if not all(
            p is None or type(p) is _PATTERN or type(p) is str
            for p in (message, module)
        ):
            return False
        if type(category) is not type or not issubclass(category, Warning):
            return False
    return True


def _drop_filters() -> None:
    """Leave ``warnings.filters`` with its plain entries only."""
    filters = warnings.filters
    kept = []
    if type(filters) is list:
        for entry in list.copy(filters):
            warnings.filters = [entry]
            if _plain_filters():
                kept.append(entry)
    warnings.filters = kept
    warnings._filters_mutated()


def _copy_tables() -> tuple[dict, dict]:
    """copy's own tables of how to (deep) copy a type, which the runner's
    copies of the inputs read: dictionaries, changed in place, not rebound."""
    return copy._deepcopy_dispatch, copy._copy_dispatch


def _forbidden_now() -> tuple:
    """The forbidden keys and names, and the operators each key allows, by
    value (a cell could empty the dict, or add to what is allowed)."""
    return tuple(
        (
            key,
            text,
            tuple(sorted(functions)),
            tuple(sorted(ops)),
            tuple(sorted(allowed_operators([key]) or ())),
        )
        for key, (text, functions, ops) in sorted(FORBIDDEN.items())
    )


#: Classes whose methods a cell may not add to (see :func:`_intact`).
_NO_NEW_METHODS = (
    "torch.Tensor.",
    "TensorBase.",
    "UntypedStorage.",
    "TypedStorage.",
    "Parameter.",
)


def _intact() -> bool:
    """Whether nothing the watch relies on was patched since the runner was
    imported: this module's functions and classes, FORBIDDEN's contents, and
    what :func:`_relied_on` lists (attributes added since do not count)."""
    now = _snapshot()
    if now.keys() != _PRISTINE.keys() or any(
        now[k] is not v for k, v in _PRISTINE.items()
    ):
        return False
    try:
        if _forbidden_now() != _PRISTINE_FORBIDDEN:
            return False
        relied = _relied_on()
    except Exception:  # a patched attribute that breaks the lookups themselves
        return False
    if not all(relied.get(k, _MISSING) is v for k, v in _PRISTINE_RELIED.items()):
        return False
    # nor the code inside them (the same function objects, other code)
    try:
        if not all(
            _same_made(_made_of(now[k]), made) for k, made in _PRISTINE_MADE.items()
        ) or not all(
            _same_made(_made_of(relied[k]), made)
            for k, made in _PRISTINE_RELIED_MADE.items()
        ):
            return False
    except Exception:  # a patched attribute that breaks the reading itself
        return False
    # nor a warning filter of the learner's, which a warning compares where
    # nothing watches (see _plain_filters)
    if not _plain_filters():
        return False
    # nor an entry of copy's tables of how to copy each type, changed in
    # place: deepcopy of the inputs, before the watch, calls it (the
    # forty-ninth red team put a hook there for tuples, which computed the
    # answer with the forbidden function)
    for table, before in zip(_copy_tables(), _PRISTINE_TABLES, strict=True):
        if table.keys() != before.keys() or any(
            table[key] is not value for key, value in before.items()
        ):
            return False
    # nor a deserializer a cell registered with torch: it sees what torch.load
    # reads (the twenty-sixth red team computed the answers from the cases there)
    from torch import serialization

    if tuple(serialization._package_registry) != _PRISTINE_REGISTRY:
        return False
    # nor a torch mode left on its stack by a cell: it would see, and could
    # forge, what the runner does after the watch (the twenty-fourth red team
    # swapped the results as they were encoded)
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return False
    # nor a method added to a tensor or storage class, where it shadows the C
    # one (Tensor.new_empty set from a cell, which deepcopy of the inputs then
    # called: the twenty-second red team)
    return all(k in _PRISTINE_RELIED for k in relied if k.startswith(_NO_NEW_METHODS))


# --- the sandbox's script: a fork server ------------------------------------------
#
# The grader starts this file once per notebook, inside its sandbox. It imports
# torch once (about 2 s), then runs each job (one exercise) in a forked child:
# the child runs the preamble and the learner's cells and calls the function;
# the parent, which never runs learner code, enforces the deadline of each stage,
# kills everything the child started, and reports to the grader on a pipe that
# the children cannot reach.


class _Hidden:
    """What the course package is in the sandbox: importable, so that a cell
    which imports it for comparison still defines its functions, but useless:
    calling anything from it raises."""

    __module__ = COURSE_PACKAGE  # so uses_course_package() recognises it

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Hidden(f"{self._name}.{attribute}")

    def __call__(self, *args, **kwargs):
        raise ModuleNotFoundError(f"{self._name}: {HIDDEN_WHILE_GRADING}")


class _HideCoursePackage(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta-path finder that gives out :class:`_Hidden` modules for the course
    package (where it is installed inside the sandbox's folders: a second barrier)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != COURSE_PACKAGE:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def hidden(attribute: str):
            if attribute.startswith("__") and attribute.endswith("__"):
                # what tools ask any module (autoreload reads __file__): absent,
                # as from a module that has none (the fifteenth red team)
                raise AttributeError(attribute)
            return _Hidden(f"{spec.name}.{attribute}")

        module.__getattr__ = hidden
        return module

    def exec_module(self, module):
        pass


def _load_screen():
    """The course's static screen of a module (:func:`.screen.screen_module`):
    the package's own where the runner is imported from it (a notebook), else
    ``screen.py`` beside this file (the grader's sandbox, where the package is
    hidden)."""
    if __package__:
        from .screen import screen_module

        return screen_module
    path = Path(__file__).with_name("screen.py")
    spec = importlib.util.spec_from_file_location("_course_screen", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for its dataclasses
    spec.loader.exec_module(module)
    return module.screen_module


class _ScreenedSource(importlib.abc.SourceLoader):
    """Loads a module from the source that was screened, not from its file
    again (which a cell could have changed in between)."""

    def __init__(self, path: str, source: bytes):
        self.path, self.source = path, source

    def get_filename(self, fullname):
        return self.path

    def get_data(self, path):
        return self.source

    def exec_module(self, module):
        # its code is the learner's, though its globals are a module's
        # (:meth:`_Watch._learners`; the forty-first red team's note)
        _WRITTEN_MODULES.add(id(module.__dict__))
        super().exec_module(module)


#: The ids of the globals of the modules a job wrote and imported (screened by
#: :class:`_ScreenedImports`): their code counts as the learner's.
_WRITTEN_MODULES: set[int] = set()


class _ScreenedImports(importlib.abc.MetaPathFinder):
    """In a job that forbids a function: a module imported from a folder the
    job can write is screened as it is imported, with the screen that read the
    cells. A module written with %%writefile was screened as a cell; but files
    can be written again by means the screen allows (a library's helper that
    opens a file: the twenty-sixth red team rewrote such a module, imported it,
    and ran code no cell could hold). Compiled modules from there are refused."""

    def __init__(self, own: Sequence[str], environment: Sequence[str]):
        """``own``: the job's folders; ``environment``: the folders Python
        imported from before any cell ran (the standard library, site-packages),
        which may lie inside a writable one (a checkout in /tmp)."""
        self.own = tuple(os.path.realpath(f) for f in own)
        self.environment = tuple(os.path.realpath(f) for f in environment)

    def _writable(self, path: str) -> bool:
        """Whether a module at ``path`` is one the job could have written: in
        its own folders, or anywhere but the environment's."""
        real = os.path.realpath(path)

        def inside(folders):
            return any(real == f or real.startswith(f + os.sep) for f in folders)

        return inside(self.own) or not inside(self.environment)

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        places = [spec.origin or "", *(spec.submodule_search_locations or [])]
        if not any(place and self._writable(place) for place in places):
            return None
        origin = spec.origin or ""
        if not origin.endswith(".py"):
            raise ImportError(
                f"the module {name} is not Python source ({origin or 'a folder'}): "
                "an exercise that forbids a function imports only screened source"
            )
        with open(origin, "rb") as handle:
            source = handle.read(2**22)
        try:  # as Python reads it: a coding line (utf-7) could hide code
            text = importlib.util.decode_source(source)
        except (SyntaxError, UnicodeDecodeError, LookupError) as err:
            raise ImportError(f"the module {name} cannot be read: {err}") from None
        finding = _SCREEN_MODULE(text)
        if finding is not None:
            raise ImportError(
                f"the module {name} holds {finding.what} (line {finding.line}), "
                "which an exercise that forbids a function refuses"
            )
        return importlib.util.spec_from_file_location(
            name,
            origin,
            loader=_ScreenedSource(origin, source),
            submodule_search_locations=spec.submodule_search_locations,
        )


_SCREEN_MODULE = _load_screen()


def _shell():
    """An IPython shell (magics and all, as in a kernel), else plain ``exec``.

    Returns (namespace, run): ``run(source)`` gives None or "ErrorName: message".
    """
    try:
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        namespace: dict = {"__name__": "__main__"}

        def run_plain(source: str):
            try:
                # not this module's "from __future__ import annotations": a
                # kernel evaluates a learner's annotations
                exec(compile(source, "<cell>", "exec", dont_inherit=True), namespace)
            except BaseException as err:
                return f"{type(err).__name__}: {err}"
            return None

        return namespace, run_plain

    config = Config()
    config.HistoryManager.enabled = False  # no history thread, no sqlite file
    shell = InteractiveShell.instance(config=config)
    # A kernel draws figures; here nothing is drawn, and a bare shell's
    # enable_gui raises, so that "%matplotlib inline" above a solution stopped
    # the cell before its def (the fifteenth red team): a GUI is a no-op.
    shell.enable_gui = lambda gui=None: None
    # %store (a kernel's storemagic) keeps variables between sessions, which
    # the grader has not: a no-op, not an error that stops the cell before its
    # def (the sixteenth red team)
    shell.register_magic_function(lambda line="": None, "line", "store")
    # Nothing can be installed while grading (no network), and "%pip install ."
    # ran a setup.py the screen had read as a cell, with its hidden code (the
    # twenty-ninth red team): pip and the shell's commands do nothing here.
    shell.register_magic_function(lambda line="": None, "line", "pip")
    shell.system = lambda command="": None
    shell.getoutput = lambda command="", split=True, depth=0: []
    # A one-line cell whose first word names a magic runs as that magic, even
    # when it reads as Python ("run in x" ran %run on a file the screen took for
    # data: the twenty-eighth red team). Magics run here only as written, %name.
    shell.automagic = False
    shell.autocall = 0

    def run(source: str):
        result = shell.run_cell(source, store_history=False, silent=True)
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            return None
        return f"{type(error).__name__}: {error}"

    run.transform = shell.transform_cell  # magics to Python, as a kernel does
    run.compiler = shell.compile  # its __future__ flags, kept from cell to cell
    return shell.user_ns, run


def _set_limits(limits: dict[str, int]) -> None:
    """Lower this process's resource limits (soft and hard) before learner code runs."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    for name, value in limits.items():
        with contextlib.suppress(AttributeError, ValueError, OSError):
            resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _descendants(root: int) -> set[int]:
    """Every live descendant of ``root`` (Linux /proc; empty elsewhere)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            line = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = line[line.rindex(")") + 2 :].split()
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _kill_all_below(root: int, child: int | None = None) -> None:
    """Kill and reap every descendant of ``root`` (orphans included: we are
    their subreaper), and ``child``'s process group."""
    if child is not None:
        with contextlib.suppress(OSError):
            os.killpg(child, signal.SIGKILL)
    for _ in range(100):
        strays = _descendants(root)
        if child is not None:
            strays.add(child)
        for pid in strays:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        # reap whatever has died (our children, adopted or not)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == child:
                child = None
        if not _descendants(root) and child is None:
            return
        time.sleep(0.01)


def _tasks() -> int:
    """Processes and threads this process can see in /proc (the sandbox's alone,
    in its PID namespace): what RLIMIT_NPROC counts too."""
    total = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if entry.isdigit():
            try:
                total += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:  # gone meanwhile
                continue
    return total


HIDDEN_WHILE_GRADING = "the course package is hidden while grading"
# Python's own, taken before any learner's cell runs (a cell can rebind the
# builtins: one that made exec skip the instructor's test passed it)
_COMPILE, _EVAL = builtins.compile, builtins.eval
#: A code object's flag for a top-level await, taken before any cell runs (a
#: cell could set inspect.CO_COROUTINE to 0: the sixty-seventh red team)
_CO_COROUTINE = inspect.CO_COROUTINE


def _hidden_names(namespace: dict) -> set[str]:
    """Names bound to the hidden package or to something from it (``tc``,
    ``from transformer_course import patchify as course_patchify``)."""
    return {
        name
        for name, value in list(namespace.items())
        # type(), not isinstance(): a learner's object may lie about __class__
        if type(value) is _Hidden
        or (
            type(value) is types.ModuleType
            and str(value.__dict__.get("__name__", "")).split(".")[0] == COURSE_PACKAGE
        )
    }


def _top_level(statement: ast.stmt) -> list[ast.AST]:
    """The nodes a statement evaluates when it runs: not the bodies of the
    functions, classes and lambdas it defines."""
    found, stack = [], [statement]
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            stack += node.decorator_list + node.args.defaults
            stack += [d for d in node.args.kw_defaults if d is not None]
        elif isinstance(node, ast.ClassDef):
            stack += node.decorator_list + node.bases + node.keywords
        elif isinstance(node, ast.Lambda):
            stack += node.args.defaults
        else:
            stack += list(ast.iter_child_nodes(node))
    return found


def _binds(statement: ast.stmt) -> set[str]:
    """The names a top-level statement binds."""
    names = set()
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        names.add(statement.name)
    for node in _top_level(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _reads(statement: ast.stmt, names: set[str]) -> bool:
    """Whether a top-level statement, as it runs, reads one of ``names`` or
    imports the course package."""
    for node in _top_level(statement):
        read = isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
        if read and node.id in names:  # read, not bound
            return True
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
            if any(m.split(".")[0] == COURSE_PACKAGE for m in modules):
                return True
    return False


#: Cell magics that run their body in the notebook's namespace, as if there
#: were no magic (timing it, capturing its output, profiling it).
_PASS_THROUGH_MAGICS = {"time", "capture", "prun"}


def _pass_through_magic(statement: ast.stmt) -> tuple[str, str, str] | None:
    """(magic, line, body) when ``statement`` is IPython's transform of a cell
    that starts with one of :data:`_PASS_THROUGH_MAGICS`, else None."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "run_cell_magic"
        and len(call.args) == 3
        and all(
            isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args
        )
    ):
        return None
    magic, line, body = (a.value for a in call.args)
    return (magic, line, body) if magic in _PASS_THROUGH_MAGICS else None


#: Names of the cells :func:`_run_cell` runs a statement at a time.
_CELL_NUMBERS = itertools.count()


def _run_cell(run, namespace: dict, source: str, skipped: set[str]) -> str | None:
    """Run a learner's cell as the notebook ran it; None or "ErrorName: message".

    The notebook has the course package (``tc``) and the sandbox hides it, so a
    cell that also looks at it (``print(tc.causal_mask(4, 4))`` above a
    ``def``) would stop here before its definitions, though it ran in the
    notebook. Such a cell, or one that reads a name bound to the package or
    left unbound by a statement passed over earlier (``skipped``, kept from
    cell to cell), runs one top-level statement at a time, passing over the
    statements that need the hidden package or those names, whose own names
    join ``skipped``; any other error stops it, as in a kernel. Other cells run
    whole (magics and all).
    """
    unavailable = skipped | _hidden_names(namespace)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))
    if COURSE_PACKAGE not in source and "tc." not in source and not words & unavailable:
        return run(source)
    transform = getattr(run, "transform", None)  # magics as IPython calls
    python = source if transform is None else transform(source)
    try:  # parsed as the kernel parses it: its __future__ flags (barry_as_FLUFL
        # makes != a syntax error) and not this module's (the sixty-third red team)
        tree = compile(
            python,
            "<cell>",
            "exec",
            flags=ast.PyCF_ONLY_AST
            | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            | _future_flags(run),
            dont_inherit=True,
        )
    except SyntaxError:  # the cell as a whole, for the kernel's own message
        return run(source)
    # its lines kept as a kernel keeps a cell's, for the line of an error
    cell_name = f"<cell {next(_CELL_NUMBERS)}>"
    linecache.cache[cell_name] = (len(python), None, python.splitlines(True), cell_name)
    for statement in tree.body:
        magic = _pass_through_magic(statement)
        if magic is not None:  # %%time above a def: its body, statement by statement
            name, line, body = magic
            captured = _CapturedOutput() if name == "capture" else None
            with captured or contextlib.nullcontext():
                error = _run_cell(run, namespace, body, skipped)
            target = line.split()[-1] if line.split() else ""
            if captured is not None and target.isidentifier():
                namespace[target] = captured.result
            if error is not None:
                return error
            unavailable |= skipped | _hidden_names(namespace)
            continue
        try:
            # the kernel's __future__ flags (a learner's own "from __future__
            # import annotations"), not this module's: inherited, they left an
            # undefined annotation unevaluated, where a kernel stops on it
            # (the sixty-second red team)
            code = compile(
                ast.Module([statement], type_ignores=[]),
                cell_name,
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT | _future_flags(run),
                dont_inherit=True,
            )
            _keep_future_flags(run, code)
            _run_compiled(code, namespace)  # a top-level await too
        except BaseException as err:  # SystemExit too: a kernel reports it
            unbound = isinstance(err, NameError) and err.name in unavailable
            if (
                HIDDEN_WHILE_GRADING in str(err)
                or unbound
                or _reads(statement, unavailable)
            ):
                # it looked at the course package (any error: the stand-in has
                # no __version__ and is not a function for inspect): it worked
                # in the notebook
                skipped |= _binds(statement)
                unavailable |= _binds(statement)
                continue
            return f"{type(err).__name__}: {_message(err)}"
        unavailable |= _hidden_names(namespace)  # an import of the package just now
    return None


#: Every ``from __future__`` feature's compiler flag.
_FUTURE_FLAGS = functools.reduce(
    operator.or_,
    (getattr(__future__, name).compiler_flag for name in __future__.all_feature_names),
    0,
)


def _future_flags(run) -> int:
    """The __future__ flags the learner's cells turned on so far (IPython's
    compiler keeps them, as a kernel does); 0 without IPython."""
    compiler = getattr(run, "compiler", None)
    return getattr(compiler, "flags", 0) & _FUTURE_FLAGS


def _keep_future_flags(run, code) -> None:
    """A statement's own ``from __future__`` import holds for the cells after
    it, as in a kernel."""
    compiler = getattr(run, "compiler", None)
    if compiler is not None:
        compiler.flags |= code.co_flags & _FUTURE_FLAGS


class _CapturedOutput:
    """``%%capture NAME``'s context: the body's output, kept as IPython keeps it
    (``result``), or thrown away where IPython is missing."""

    def __init__(self):
        try:
            from IPython.utils.capture import capture_output
        except ImportError:  # pragma: no cover - IPython comes with Jupyter
            capture_output = None
        self._inner = capture_output() if capture_output else contextlib.nullcontext()
        self.result = None

    def __enter__(self):
        self.result = self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)


# Python's own, taken before any learner's cell runs
_GETTRACE, _GETPROFILE = sys.gettrace, sys.getprofile
_THREADING_HOOKS = (threading.gettrace, threading.getprofile)


def _watching_hooks() -> str:
    """The hooks a learner's cell left that would watch an instructor's test
    run ("a profile hook", ...), or "". They are not the only way to forge a
    test's verdict (README: a test runs in the student's process), but the
    plainest."""
    found = []
    if _GETTRACE() is not None or _THREADING_HOOKS[0]() is not None:
        found.append("a trace hook")
    if _GETPROFILE() is not None or _THREADING_HOOKS[1]() is not None:
        found.append("a profile hook")
    if threading.active_count() > 1 or _os_threads() > _OS_THREADS_AT_START[0]:
        # the second: threads started with _thread, which threading does not
        # count (the twentieth red team forged a test's verdict from one)
        found.append("a thread running")
    return " and ".join(found)


def _left_running() -> str:
    """The threads, processes and hooks the cells left running ("a thread
    running and a process running"), or ""."""
    found = [_watching_hooks()] if _watching_hooks() else []
    if _descendants(os.getpid()) or _others_in_the_sandbox():
        found.append("a process running")
    return " and ".join(found)


def _others_in_the_sandbox() -> bool:
    """Whether a process other than the runner (the sandbox's PID 1) and this
    job runs in the sandbox: one a cell double-forked is the runner's child,
    not this job's (the twenty-fourth red team). Only in a PID namespace of the
    grader's own, where the runner is PID 1."""
    if os.getppid() != 1:
        return False
    try:
        pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
    except OSError:
        return False
    return bool(pids - {1, os.getpid()})


def _os_threads() -> int:
    """The threads this process runs, as the operating system counts them (0
    where /proc cannot say)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


#: Threads at the runner's start (torch's own included): more later is a cell's
_OS_THREADS_AT_START = [_os_threads()]


def _after_the_standard_library(path: list[str]) -> int:
    """Where a Jupyter kernel puts its working folder ('') in ``sys.path``:
    after the leading entries of the standard library (its zip, its folder,
    lib-dynload), before site-packages, so that a module a cell wrote shadows
    an installed package of the same name there too, and never the standard
    library."""
    stdlib = os.path.normpath(sysconfig.get_path("stdlib"))
    index = 0
    for entry in path:
        parts = os.path.normpath(entry).split(os.sep) if entry else []
        installed = "site-packages" in parts or "dist-packages" in parts
        inside = entry and (
            os.path.normpath(entry) == stdlib
            or os.path.normpath(entry).startswith(stdlib + os.sep)
        )
        zipped = entry.endswith(".zip") and os.path.basename(entry).startswith("python")
        if installed or not (inside or zipped):
            break
        index += 1
    return index


def _no_new_audit_hooks(event: str, args: tuple) -> None:
    """An audit hook that refuses every later one: a learner's hook would see
    the instructor's test compiled (its hidden asserts) and every file opened."""
    if event == "sys.addaudithook":
        raise RuntimeError("audit hooks are not available while grading")


# --- the runner's pipes ---------------------------------------------------------
#
# A job's child talks to the runner through three channels made for it alone
# (connected sockets, see _channel), never through files: its working folder is
# the learner's, and a cell that can write there could forge what a file says
# (the twenty-fifth red team wrote the result file). Progress lines go up one
# channel, the checks' cases come down another once
# every cell has run (so no cell can read them, or compute their answers
# unwatched), and the result goes up the third as one frame: a header holding its
# length, then its bytes. The runner takes the result only as exactly one frame
# after a progress that followed the stages in order; anything else a cell wrote
# to a channel is a job that tampered, and scores nothing. None of this stops code
# that got past the screen (screen.py) and runs as the child does: it could speak
# the protocol itself. The screen, and the screen of modules at import
# (_ScreenedImports), are that barrier.

FRAME_HEADER = 8  # bytes: a frame's length, big-endian


def _as_stored(storage, location):  # torch.load's map_location: as saved
    return storage


def frame(payload: bytes) -> bytes:
    """``payload`` as one frame: its length, then its bytes."""
    return len(payload).to_bytes(FRAME_HEADER, "big") + payload


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd`` (blocking); EOFError if it ends before."""
    parts, left = [], size
    while left:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            raise EOFError(f"{size - left:,} of {size:,} bytes before the pipe ended")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def read_frame(fd: int, limit: int | None = None) -> bytes:
    """One frame's bytes from ``fd``; ValueError past ``limit`` bytes."""
    size = int.from_bytes(_read_exactly(fd, FRAME_HEADER), "big")
    if limit is not None and size > limit:
        raise ValueError(f"a frame of {size:,} bytes (at most {limit:,})")
    return _read_exactly(fd, size)


def unframe(data: bytes) -> bytes:
    """The payload of ``data`` if it is exactly one frame; ValueError if not."""
    if len(data) < FRAME_HEADER:
        raise ValueError("no result came back")
    size = int.from_bytes(data[:FRAME_HEADER], "big")
    if len(data) != FRAME_HEADER + size:
        raise ValueError("the result pipe held more or less than one result")
    return data[FRAME_HEADER:]


def _channel() -> tuple[int, int]:
    """Two connected sockets' descriptors, one for each side of a job. Sockets
    rather than pipes: a pipe can be opened again by its path in /proc/self/fd,
    by anything that opens a file (a library's helper that writes one: the
    twenty-sixth red team), a socket cannot."""
    one, other = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return one.detach(), other.detach()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


#: A job's cell ``[index, source, LOCKED]``: a locked cell's text as the grader
#: has it (chapter 4's given code, an instructor's test above the exercise),
#: never the submission's; run as a kernel runs it on the way down.
LOCKED = "locked"


def locked_ids(cells) -> int:
    """How many distinct locked cells (by id, ``[index, source, LOCKED, id]``) a
    job runs: each is granted one --timeout, whatever its copies."""
    return len({str(cell[3]) for cell in cells if len(cell) > 3 and cell[2] == LOCKED})


_LOCKED_NUMBERS = itertools.count()


def _compiled(run, source: str, filename: str):
    """``source`` compiled as a kernel compiles a cell: with the kernel's
    __future__ flags (a learner's ``from __future__ import ...`` above), not
    this module's, and a top-level ``await`` allowed; with the runner's own
    compile, which no cell can replace; its lines kept in ``linecache``, where
    ``inspect.getsource`` and tracebacks find them, as IPython keeps a cell's.
    A __future__ import in ``source`` holds for the cells after it (the
    sixty-fourth and sixty-sixth red teams)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT | _future_flags(run)
    code = _COMPILE(source, filename, "exec", flags, True)
    _keep_future_flags(run, code)
    return code


def _run_compiled(code: types.CodeType, namespace: dict) -> None:
    """Run compiled cell code (a learner's statement, a locked cell) with the
    runner's own eval; a top-level ``await``, which a kernel allows, runs on a
    fresh event loop, to its end."""
    result = _EVAL(code, namespace)  # exec-mode code: None, or a coroutine
    if code.co_flags & _CO_COROUTINE:
        _run_to_its_end(result)


def _run_to_its_end(coroutine) -> None:
    """Run a cell's top-level await on a fresh event loop, and make sure that
    it ran to its end: a cell can replace asyncio.run with one that closes the
    coroutine unrun, which passed an instructor's test that awaits (the
    sixty-seventh red team); a kernel is not fooled, and neither is this."""
    finished = []

    async def driven():
        await coroutine
        finished.append(True)

    import asyncio

    asyncio.run(driven())
    if not finished:
        raise RuntimeError("the cell's top-level await did not run to its end")


def _run_locked_cell(run, namespace: dict, source: str) -> None:
    """A locked cell's text, run with the runner's own eval and compile (a
    learner's ``compile = False`` or ``from re import compile`` is no
    matter): what it binds and imports holds below it, as in a kernel; what
    it raises (a failed assert of an instructor's test) is its own grade's,
    not the exercise's (the sixty-third and sixty-fourth red teams)."""
    # try/except, not contextlib.suppress, which a cell can replace
    try:
        name = f"<locked cell {next(_LOCKED_NUMBERS)}>"  # its own lines each
        _run_compiled(_compiled(run, source, name), namespace)
    except BaseException:  # its failures: the test's own job says them
        pass


def _child(
    plan: dict, job: dict, work: Path, progress_fd: int, cases_fd: int, result_fd: int
) -> int:
    """In the forked child: the preamble, the learner's cells, the calls."""
    # What the job needs, read before any learner code runs, into values no
    # cell can reach and change (the thirteenth red team rewrote the job's
    # dict, found with gc, to replace a test or empty the forbidden list); the
    # other jobs, and their instructors' tests, are dropped from this process.
    preamble, cells = plan["preamble"], tuple(tuple(cell) for cell in job["cells"])
    test, function_name = job.get("test"), job.get("function")
    forbidden, limits = tuple(job.get("forbidden", ())), dict(plan.get("limits") or {})
    shape = tuple(int(n) for n in job.get("shape", ()))
    result_pipe = _identity(result_fd)  # the pipe the runner reads, as given
    for other in plan.get("jobs", ()):
        other.clear()
    job.clear()
    plan.clear()
    sys.addaudithook(_no_new_audit_hooks)
    os.chdir(work)
    if forbidden:  # what the job may write, screened as it is imported
        environment = [p for p in sys.path if p and os.path.isdir(p)]
        sys.meta_path.insert(0, _ScreenedImports([str(work)], environment))
    # a kernel imports from its working folder (a module a cell wrote with
    # %%writefile); the runner runs isolated (-I), so the folder is added where
    # a kernel has it: after the standard library, before site-packages
    sys.path.insert(_after_the_standard_library(sys.path), os.getcwd())
    progress = os.fdopen(progress_fd, "w", buffering=1, encoding="utf-8")
    namespace, run = _shell()
    _OS_THREADS_AT_START[0] = _os_threads()  # this process's, before any cell
    progress.write("preamble\n")
    preamble_error = run(preamble)
    errors, skipped = [], set()
    for index, source, *kind in cells:
        progress.write(f"cell {index}\n")
        if kind[:1] == [LOCKED]:  # the grader's own text of a locked cell
            _run_locked_cell(run, namespace, source)
            continue
        error = _run_cell(run, namespace, source, skipped)
        if error is not None:
            errors.append([index, error[:300]])
    progress.write("call\n")
    result = {
        "preamble_error": preamble_error,
        "defined": True,
        "errors": errors,
        "outcomes": [],
    }
    if test is not None:  # an instructor's own test cell, run last
        # compiled as it stands: not through IPython, whose input transformers
        # the learner's cells can change (one that empties later cells passed it)
        hooked = _watching_hooks()
        if hooked:
            # a hook sees the test's frames start and can end the process with
            # a forged verdict (the fourteenth red team): not run, no points
            test_error = f"RuntimeError: a cell left {hooked} set: the test was not run"
        else:
            try:  # with the kernel's __future__ flags, not this module's
                _run_compiled(_compiled(run, test, _TEST_FILE), namespace)
                test_error = None
            except BaseException as err:
                test_error = f"{type(err).__name__}: {_message(err)}".rstrip(
                    ": "
                ) + _failed_line(err, test)
        result["test_error"] = "" if test_error is None else test_error[:300]
    else:
        function = namespace.get(function_name)
        result["defined"] = callable(function)
        if callable(function):
            result["outcomes"] = _checks(function, cases_fd, shape, forbidden, limits)
    payload = frame(encode_result(result))
    if _identity(result_fd) != result_pipe:  # a cell put something else there
        return 71
    _write_all(result_fd, payload)
    progress.write("done\n")
    return 0


def _checks(function, cases_fd: int, shape: tuple, forbidden: tuple, limits: dict):
    """Every check's outcomes: the cases read from the runner now, after the
    cells, with torch's loader as the runner found it (see :func:`_intact`),
    then the calls."""
    refusal = ""
    # where something is forbidden, a thread or process a cell left running
    # could compute it while the watched call waits (a library's worker pool:
    # the twenty-second red team): no call is made
    left = _left_running() if forbidden else ""
    if left:
        refusal = f"a cell left {left}, which the checks cannot watch"
    elif not _intact():  # the loader below, or the watch, patched from a cell
        refusal = forbidden_message("escape")
    cases: list = []
    if not refusal:
        try:
            cases = torch.load(
                io.BytesIO(read_frame(cases_fd)),
                weights_only=True,
                # a callable: torch's registry of deserializers, which a cell
                # can add to (the twenty-sixth red team), is never consulted
                map_location=_as_stored,
            )
        except Exception:
            cases = []
        if [len(check) for check in cases] != list(shape):
            refusal = forbidden_message("escape")
    if refusal:
        refused = _outcome(error="ForbiddenUse", message=refusal)
        return [[refused] * n for n in shape]
    outcomes = []
    for check in cases:
        outcomes.append(call_cases(function, check, forbidden, limits or None))
        # and none started since: one started inside a call, where something
        # let the learner's code run past the watch (the fifty-third red team,
        # a helper thread of asyncio's), would compute the later calls' answers
        left = _left_running() if forbidden else ""
        if left:
            message = f"your function left {left}, which the checks cannot watch"
            refused = _outcome(error="ForbiddenUse", message=message)
            return [[refused] * n for n in shape]
    if not _intact():
        # patched during the last call, where no later call_cases looks: the
        # encoding below would run it (a Tensor.numpy set through an alias
        # swapped the results' bytes: the twenty-sixth red team)
        refused = _outcome(error="ForbiddenUse", message=forbidden_message("escape"))
        return [[refused] * n for n in shape]
    return outcomes


def _set_nonblocking(*fds: int) -> None:
    for fd in fds:
        os.set_blocking(fd, False)


def _drain(fd: int, into: bytearray, limit: int) -> bool:
    """Read what ``fd`` holds now into ``into``, up to ``limit`` bytes in all;
    False once more than ``limit`` came."""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError:  # nothing more now (EAGAIN), or the other end is gone
            return True
        if not chunk:
            return True
        into += chunk
        if len(into) > limit:
            return False


def _grader_gone(report_fd: int) -> bool:
    """Whether nobody reads the grader's pipe any more: the grader is gone."""
    watcher = select.poll()
    watcher.register(report_fd, select.POLLERR | select.POLLHUP)
    try:
        return bool(watcher.poll(0))
    except OSError:
        return True


def _run_job(plan: dict, number: int, job: dict, source: int, report_fd: int) -> dict:
    """Fork a child for one job, watch its deadlines, clean up after it."""
    # a folder of its own that no earlier cell can have made (the twenty-sixth
    # red team made the next job's, and the runner died on its mkdir)
    work = Path(tempfile.mkdtemp(prefix=f"job{number}-", dir=plan["work"]))
    progress_read, progress_write = _channel()
    cases_write, cases_read = _channel()
    result_read, result_write = _channel()
    pid = os.fork()
    if pid == 0:  # the child
        code = 70
        try:
            for fd in (report_fd, source, progress_read, cases_write, result_read):
                os.close(fd)
            os.setpgid(0, 0)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
                with contextlib.suppress(AttributeError, ValueError, OSError):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            code = _child(plan, job, work, progress_write, cases_read, result_write)
        finally:
            os._exit(code)
    for fd in (progress_write, cases_read, result_write):
        os.close(fd)
    # the job's cases, read from the grader only now: the child, a copy of this
    # process made before, never held them in its memory
    to_send = frame(read_frame(source))
    _set_nonblocking(progress_read, cases_write, result_read)
    # The stages a job goes through, in order. The child writes each one as it
    # starts it, and each resets the stage's clock; a line out of this order was
    # written by a cell, and the job scores nothing. The whole job has a cap.
    stages = ["preamble", *(f"cell {cell[0]}" for cell in job["cells"]), "call", "done"]
    # a locked cell's time (an instructor's test above the exercise) is the
    # instructor's: each id (not each copy) adds one --timeout to the limit
    job_limit = plan["job_limit"] + plan["timeout"] * locked_ids(job["cells"])
    reached, started = -1, time.monotonic()
    job_started, pending, progress = started, b"", bytearray()
    result, tampered = bytearray(), ""
    status, detail, code = None, "", None
    limit = plan["max_result_bytes"] + FRAME_HEADER

    def advance() -> None:  # read every new line, in order
        nonlocal reached, started, pending, tampered
        progress.clear()
        _drain(progress_read, progress, 1 << 20)
        *lines, pending = (pending + bytes(progress)).split(b"\n")
        if len(pending) > 100:  # no stage's line is this long
            lines, pending = [*lines, pending], b""
        for line in lines:
            expected = stages[reached + 1] if reached + 1 < len(stages) else None
            if line.decode(errors="replace") != expected:
                tampered = tampered or "its progress lines were not the grader's"
                continue
            reached, started = reached + 1, time.monotonic()

    polls = 0
    while code is None:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(wait_status)
            break
        advance()
        if not _drain(result_read, result, limit):
            status, detail = "error", f"more than {limit:,} bytes of results"
            break
        if to_send and reached >= stages.index("call"):
            try:
                to_send = to_send[os.write(cases_write, to_send) :]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # the child closed its end: it will not call
                to_send = b""
        polls += 1
        if polls % 20 == 0 and _grader_gone(report_fd):
            # the grader was killed (its sandbox's parent-death signal did not
            # reach this PID 1: an instructor's Ctrl-C left the job running)
            _kill_all_below(os.getpid(), pid)
            os._exit(0)
        # As PID 1 of the sandbox, /proc lists only the sandbox's tasks: a cap on
        # its processes and threads, beside RLIMIT_NPROC (which refuses more)
        if os.getpid() == 1 and polls % 4 == 0 and _tasks() > plan["max_tasks"]:
            status = "crashed"
            detail = f"started more than {plan['max_tasks']} processes and threads"
            break
        now = time.monotonic()
        if now - started > plan["timeout"]:
            status = "timeout"
            detail = f"ran for more than {plan['timeout']:g} s"
            break
        if now - job_started > job_limit:
            status = "overtime"
            detail = (
                f"the exercise's cells and checks took more than "
                f"{job_limit:g} s in all: make the slow cells faster"
            )
            break
        sending = [cases_write] if to_send else []
        select.select([progress_read, result_read], sending, [], 0.005)
    _kill_all_below(os.getpid(), pid if code is None else None)
    advance()
    complete = _drain(result_read, result, limit)
    stage = stages[reached] if reached >= 0 else "start"
    if status is None and (stage != "done" or code != 0):  # died on its own
        status = "crashed"
        why = f"signal {-code}" if code is not None and code < 0 else f"status {code}"
        detail = f"the process died ({why}: os._exit, a crash or running out of memory)"
    outcomes = None
    if status is None:
        try:
            if tampered:
                raise ValueError(tampered)
            if not complete:
                raise ValueError(f"more than {limit:,} bytes of results")
            outcomes = base64.b64encode(unframe(bytes(result))).decode()
            status = "ok"
        except ValueError as err:
            status, detail = "error", f"could not read the results: {err}"
    for fd in (progress_read, cases_write, result_read):
        os.close(fd)
    shutil.rmtree(work, ignore_errors=True)
    return {"status": status, "stage": stage, "detail": detail, "outcomes": outcomes}


def main(argv: list[str] | None = None) -> int:
    """Run a plan inside the grader's sandbox: ``python runner.py -``.

    On stdin, one frame (see :func:`frame`) of the plan's JSON: the preamble,
    the jobs (cells, function, forbidden functions, the number of cases of each
    check), the stage deadline, resource limits and the scratch folder; then one
    frame per job of its cases (``torch.save`` of one list per check), read only
    when that job's child has started. One JSON line per job start and end goes
    to stdout, the grader's pipe.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["-"]:
        raise SystemExit("usage: runner.py -  (the plan, then the cases, on stdin)")
    # read once, before any learner code runs: it holds the instructors' tests,
    # hidden ones included, on a pipe no later process can read again
    source = os.dup(0)
    plan = json.loads(read_frame(source).decode("utf-8"))
    _set_limits(plan.get("rlimits", {}))
    # PR_SET_PDEATHSIG, set here: setpriv's change of user cleared bwrap's. When
    # the grader stops the sandbox, we die, and with us (PID 1) all it holds.
    _prctl(1, signal.SIGKILL)
    _prctl(4, 0)  # PR_SET_DUMPABLE: children may not open our pipes via /proc
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: detached grandchildren come back to us
    sys.meta_path.insert(0, _HideCoursePackage())
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"):  # PID 1 of the sandbox:
        with contextlib.suppress(AttributeError, ValueError, OSError):  # children
            signal.signal(getattr(signal, name), signal.SIG_IGN)  # may not stop it
    report_fd = os.dup(1)
    report = os.fdopen(report_fd, "w", buffering=1, encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # children inherit these: their output goes nowhere
        os.dup2(devnull, fd)
    for module in plan.get("warm", ()):  # imported once, shared by every child
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    # the first call under the watch sets up torch's mode machinery: once here
    # rather than in every child
    call_cases(
        lambda x: (x @ x.T).exp().sum(-1), [(torch.ones(2, 2),)], list(FORBIDDEN)
    )
    for number, job in enumerate(plan["jobs"]):
        print(json.dumps({"job": number, "event": "start"}), file=report)
        result = _run_job(plan, number, job, source, report_fd)
        print(json.dumps({"job": number, "event": "end", **result}), file=report)
    report.flush()
    os._exit(0)  # skips the interpreter's slow shutdown (torch): nothing is left to do


_MISSING = object()
#: The code of :meth:`_Watch.profiled`, whose own calls its hook leaves alone
_PROFILED_CODE = _Watch.profiled.__wrapped__.__code__
_PRISTINE = _snapshot()
_PRISTINE_FORBIDDEN = _forbidden_now()
_PRISTINE_RELIED = _relied_on()
_PRISTINE_MADE = {k: _made_of(v) for k, v in _PRISTINE.items()}
_PRISTINE_RELIED_MADE = {k: _made_of(v) for k, v in _PRISTINE_RELIED.items()}
_PRISTINE_REGISTRY = tuple(torch.serialization._package_registry)
_PRISTINE_TABLES = tuple(dict(table) for table in _copy_tables())

if __name__ == "__main__":
    sys.exit(main())
