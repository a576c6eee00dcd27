"""Real operators written as TVM tensor expressions, each tuned by OpEvo through NNI:

    nni-opevo launch --operator examples.operators:depthwise_conv2d --target cpu --trials 64

(run from the repository root, or copy this file beside your experiment and name it
``operators:...``). Each function takes its shape as keyword arguments and returns an
``Operator``: the inputs and the output as ``te`` tensors, the floating-point operations of one
run, a float64 NumPy reference the trials are checked against, and the library call a NumPy or
PyTorch user would make instead, which the exported kernel is timed against (docs/your-operator.md).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import te, topi

from trial_code.operators import Operator


def matmul(n: int = 256, k: int = 256, m: int = 256) -> Operator:
    """C = A B, the operator the built-in MatMul template also covers: the derived space is the
    hand-written one's."""
    a = te.placeholder((n, k), "float32", name="A")
    b = te.placeholder((k, m), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return Operator([a, b], c, flops=2 * n * m * k, reference=lambda a, b: a @ b,
                    library=("NumPy", lambda a, b: lambda: np.matmul(a, b)))


def matmul_fp16(n: int = 256, k: int = 512, m: int = 512) -> Operator:
    """C = A B in mixed precision, as a transformer's layers run it on a GPU: half-precision A and
    B, their products summed in float32, the result rounded to half precision."""
    a = te.placeholder((n, k), "float16", name="A")
    b = te.placeholder((k, m), "float16", name="B")
    r = te.reduce_axis((0, k), name="k")
    product = te.compute((n, m), lambda i, j: te.sum(a[i, r].astype("float32") * b[r, j].astype("float32"), axis=r),
                         name="product")
    c = te.compute((n, m), lambda i, j: product[i, j].astype("float16"), name="C")

    def library(a: np.ndarray, b: np.ndarray) -> Callable[[], Any]:
        # Neither NumPy nor PyTorch has a fast float16 product on most CPUs (PyTorch's ran at 2.5
        # GFLOPS on AVX-512): a user converts to float32 once and calls BLAS, rounding the result.
        a32, b32, c32 = a.astype(np.float32), b.astype(np.float32), np.empty((n, m), np.float32)
        return lambda: np.matmul(a32, b32, out=c32).astype(np.float16)

    return Operator([a, b], c, flops=2 * n * m * k, reference=lambda a, b: a @ b,
                    library=("NumPy (float32)", library))


def depthwise_conv2d(batch: int = 1, channels: int = 64, height: int = 56, width: int = 56, kernel: int = 3,
                     stride: int = 1) -> Operator:
    """MobileNet's depthwise convolution (NCHW, one filter per channel, "same" padding): the
    padding stage is inlined into the sum."""
    pad = kernel // 2
    x = te.placeholder((batch, channels, height, width), "float32", name="X")
    w = te.placeholder((channels, 1, kernel, kernel), "float32", name="W")
    padded = te.compute((batch, channels, height + 2 * pad, width + 2 * pad), lambda b, c, h, v: te.if_then_else(
        te.all(h >= pad, h < height + pad, v >= pad, v < width + pad), x[b, c, h - pad, v - pad], 0.0), name="pad")
    out_h, out_w = (height + 2 * pad - kernel) // stride + 1, (width + 2 * pad - kernel) // stride + 1
    ry, rx = te.reduce_axis((0, kernel), name="ry"), te.reduce_axis((0, kernel), name="rx")
    y = te.compute((batch, channels, out_h, out_w), lambda b, c, h, v: te.sum(
        padded[b, c, h * stride + ry, v * stride + rx] * w[c, 0, ry, rx], axis=[ry, rx]), name="Y")

    def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((batch, channels, out_h, out_w))
        for dy in range(kernel):
            for dx in range(kernel):
                window = xp[:, :, dy:dy + stride * out_h:stride, dx:dx + stride * out_w:stride]
                out += window * w[None, :, 0, dy, dx, None, None]
        return out

    def library(x: np.ndarray, w: np.ndarray) -> Callable[[], Any]:
        torch = _torch()
        tx, tw = torch.from_dlpack(x), torch.from_dlpack(w)
        return lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad, groups=channels)

    return Operator([x, w], y, flops=2 * batch * channels * out_h * out_w * kernel * kernel, reference=reference,
                    library=("PyTorch", library))


def matmul_bias_gelu(n: int = 256, k: int = 512, m: int = 512) -> Operator:
    """A transformer's feed-forward first half: GELU(A B + bias), the bias and the activation
    fused into the product's tiles."""
    a = te.placeholder((n, k), "float32", name="A")
    b = te.placeholder((k, m), "float32", name="B")
    bias = te.placeholder((m,), "float32", name="bias")
    r = te.reduce_axis((0, k), name="k")
    product = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="product")
    y = te.compute((n, m), lambda i, j: _gelu(product[i, j] + bias[j]), name="Y")

    def reference(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
        from scipy.special import erf

        z = a @ b + bias
        return 0.5 * z * (1 + erf(z / math.sqrt(2)))

    def library(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> Callable[[], Any]:
        torch = _torch()
        ta, tb, tbias = torch.from_dlpack(a), torch.from_dlpack(b), torch.from_dlpack(bias)
        return lambda: torch.nn.functional.gelu(torch.addmm(tbias, ta, tb))

    return Operator([a, b, bias], y, flops=2 * n * m * k + 8 * n * m, reference=reference,
                    library=("PyTorch", library))


def _gelu(z: te.Tensor) -> te.Tensor:
    return 0.5 * z * (1.0 + te.erf(z * (1 / math.sqrt(2))))


def softmax(rows: int = 1024, cols: int = 1024) -> Operator:
    """Row-wise softmax, four stages (maximum, exponentials, their sum, the division): the
    maximum and the exponentials are computed inside each tile of rows."""
    x = te.placeholder((rows, cols), "float32", name="X")
    y = topi.nn.softmax(x, axis=1)

    def reference(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def library(x: np.ndarray) -> Callable[[], Any]:
        torch = _torch()
        tx = torch.from_dlpack(x)
        return lambda: torch.softmax(tx, dim=1)

    return Operator([x], y, flops=4 * rows * cols, reference=reference, library=("PyTorch", library))


def layer_norm(rows: int = 1024, cols: int = 768, epsilon: float = 1e-5) -> Operator:
    """Layer normalization over the last axis with a learned scale and shift, as in transformers."""
    x = te.placeholder((rows, cols), "float32", name="X")
    gamma = te.placeholder((cols,), "float32", name="gamma")
    beta = te.placeholder((cols,), "float32", name="beta")
    j = te.reduce_axis((0, cols), name="j")
    mean = te.compute((rows,), lambda i: te.sum(x[i, j] / cols, axis=j), name="mean")
    j2 = te.reduce_axis((0, cols), name="j2")
    variance = te.compute((rows,), lambda i: te.sum(te.power(x[i, j2] - mean[i], 2.0) / cols, axis=j2),
                          name="variance")
    y = te.compute((rows, cols), lambda i, c: (x[i, c] - mean[i]) * te.rsqrt(variance[i] + epsilon) * gamma[c]
                   + beta[c], name="Y")

    def reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
        centred = x - x.mean(axis=1, keepdims=True)
        return centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + epsilon) * gamma + beta

    def library(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> Callable[[], Any]:
        torch = _torch()
        tx, tg, tb = torch.from_dlpack(x), torch.from_dlpack(gamma), torch.from_dlpack(beta)
        return lambda: torch.nn.functional.layer_norm(tx, (cols,), tg, tb, epsilon)

    return Operator([x, gamma, beta], y, flops=8 * rows * cols, reference=reference, library=("PyTorch", library))


def dense_layer_norm(tokens: int = 128, features: int = 768, outputs: int = 768, epsilon: float = 1e-5) -> Operator:
    """A transformer's dense layer and the layer normalization after it, fused: each token's
    outputs x W^T + bias, normalized over the outputs with a learned scale and shift. The dense
    layer is a stage with columns of its own before the normalization's reductions."""
    x = te.placeholder((tokens, features), "float32", name="X")
    w = te.placeholder((outputs, features), "float32", name="W")
    bias = te.placeholder((outputs,), "float32", name="bias")
    gamma = te.placeholder((outputs,), "float32", name="gamma")
    beta = te.placeholder((outputs,), "float32", name="beta")
    f = te.reduce_axis((0, features), name="f")
    product = te.compute((tokens, outputs), lambda t, o: te.sum(x[t, f] * w[o, f], axis=f), name="product")
    dense = te.compute((tokens, outputs), lambda t, o: product[t, o] + bias[o], name="dense")
    o1, o2 = te.reduce_axis((0, outputs), name="o1"), te.reduce_axis((0, outputs), name="o2")
    mean = te.compute((tokens,), lambda t: te.sum(dense[t, o1] / outputs, axis=o1), name="mean")
    variance = te.compute((tokens,), lambda t: te.sum(te.power(dense[t, o2] - mean[t], 2.0) / outputs, axis=o2),
                          name="variance")
    y = te.compute((tokens, outputs), lambda t, o: (dense[t, o] - mean[t]) * te.rsqrt(variance[t] + epsilon)
                   * gamma[o] + beta[o], name="Y")

    def reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
        centred = x @ w.T + bias
        centred -= centred.mean(axis=1, keepdims=True)
        return centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + epsilon) * gamma + beta

    def library(x: np.ndarray, w: np.ndarray, bias: np.ndarray, gamma: np.ndarray, beta: np.ndarray
                ) -> Callable[[], Any]:
        torch = _torch()
        tx, tw, tbias, tg, tb = (torch.from_dlpack(a) for a in (x, w, bias, gamma, beta))
        functional = torch.nn.functional
        return lambda: functional.layer_norm(functional.linear(tx, tw, tbias), (outputs,), tg, tb, epsilon)

    return Operator([x, w, bias, gamma, beta], y, flops=2 * tokens * features * outputs + 10 * tokens * outputs,
                    reference=reference, library=("PyTorch", library))


def attention(heads: int = 8, seq: int = 128, dim: int = 64) -> Operator:
    """Scaled dot-product attention, softmax(Q K^T / sqrt(dim)) V, for each of ``heads`` (a batch
    of heads folded into one axis): the scores' softmax is inlined into the product with V."""
    q = te.placeholder((heads, seq, dim), "float32", name="Q")
    k = te.placeholder((heads, seq, dim), "float32", name="K")
    v = te.placeholder((heads, seq, dim), "float32", name="V")
    d = te.reduce_axis((0, dim), name="d")
    scale = 1 / math.sqrt(dim)
    scores = te.compute((heads, seq, seq), lambda h, i, j: te.sum(q[h, i, d] * k[h, j, d] * scale, axis=d),
                        name="scores")
    weights = topi.nn.softmax(scores, axis=2)
    t = te.reduce_axis((0, seq), name="t")
    y = te.compute((heads, seq, dim), lambda h, i, c: te.sum(weights[h, i, t] * v[h, t, c], axis=t), name="Y")

    def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        s = q @ k.transpose(0, 2, 1) * scale
        e = np.exp(s - s.max(axis=2, keepdims=True))
        return e / e.sum(axis=2, keepdims=True) @ v

    def library(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> Callable[[], Any]:
        torch = _torch()
        tq, tk, tv = torch.from_dlpack(q), torch.from_dlpack(k), torch.from_dlpack(v)
        return lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)

    return Operator([q, k, v], y, flops=4 * heads * seq * seq * dim + 4 * heads * seq * seq, reference=reference,
                    library=("PyTorch", library))


def mse_loss(rows: int = 1024, cols: int = 1024) -> Operator:
    """The mean squared error of a prediction against its target: a reduction to a single value,
    summed in partial results (per parallel chunk and vector lane on the CPU, per thread on the
    GPU) that a last step combines, then divided by the count."""
    prediction = te.placeholder((rows, cols), "float32", name="P")
    target = te.placeholder((rows, cols), "float32", name="T")
    i, j = te.reduce_axis((0, rows), name="i"), te.reduce_axis((0, cols), name="j")
    squares = te.compute((), lambda: te.sum(te.power(prediction[i, j] - target[i, j], 2), axis=[i, j]),
                         name="squares")
    y = te.compute((), lambda: squares[()] / (rows * cols), name="loss")

    def library(p: np.ndarray, t: np.ndarray) -> Callable[[], Any]:
        torch = _torch()
        tp, tt = torch.from_dlpack(p), torch.from_dlpack(t)
        return lambda: torch.nn.functional.mse_loss(tp, tt)

    return Operator([prediction, target], y, flops=3 * rows * cols,
                    reference=lambda p, t: np.mean(np.square(p - t)), library=("PyTorch", library))


def embedding_bag(bags: int = 1024, per_bag: int = 32, vocab: int = 50000, dim: int = 64) -> Operator:
    """A recommender's embedding bag: each bag's rows of an embedding table, picked by the ids it
    holds, summed. The ids are positions in the table, so the trials draw them among its rows
    and the exported kernel refuses one past them (docs/your-operator.md, "Indexing by an input")."""
    ids = te.placeholder((bags, per_bag), "int64", name="ids")
    table = te.placeholder((vocab, dim), "float32", name="table")
    k = te.reduce_axis((0, per_bag), name="k")
    y = te.compute((bags, dim), lambda b, d: te.sum(table[ids[b, k], d], axis=k), name="Y")

    def library(ids: np.ndarray, table: np.ndarray) -> Callable[[], Any]:
        torch = _torch()
        tids, ttable = torch.from_dlpack(ids), torch.from_dlpack(table)
        return lambda: torch.nn.functional.embedding_bag(tids, ttable, mode="sum")

    return Operator([ids, table], y, flops=bags * per_bag * dim,
                    reference=lambda ids, table: table[ids].sum(axis=1), library=("PyTorch", library))


def _torch() -> Any:
    """PyTorch, on the device its inputs are on: ``torch.from_dlpack`` reads NumPy arrays (the CPU)
    and the GPU's tensors alike, without a copy (ImportError where it is not installed: the
    kernel then has no library to be timed against)."""
    import torch

    return torch
