"""Named tensor-operator workloads (the papers' shapes) and custom shapes from flags.

A workload is an operator family plus its shape; templates read the shape fields they need.
The names are those of the OpEvo paper (appendix B: MM1-3, BMM1-3, C1-2) and of AutoTVM's
ResNet-18 table (``R1``-``R12``, batch 1).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

FAMILIES = ("matmul", "batch_matmul", "conv2d", "operator")
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""What a workload's (or a network's) name may be: it becomes a file name and a word of the trial
command, so no path separators, no leading dot, nothing a shell reads."""
GEMM_LAYOUTS = ("NN", "TN", "NT")
MAX_BYTES = 4 << 30
"""A workload's inputs and output together at most: a trial allocates them on the host and the
device, and computes its reference over them."""


@dataclass(frozen=True)
class Workload:
    """One operator instance. ``shape`` holds, by family:

    - matmul / batch_matmul: ``n``, ``m``, ``k``, ``batch`` (1 for matmul) and ``layout``: first
      letter T when A is stored K x N (transposed), second letter T when B is stored M x K.
    - conv2d (NCHW, direct): ``batch``, ``in_channels``, ``height``, ``width``, ``out_channels``,
      ``kernel_h``, ``kernel_w``, ``stride``, ``padding``.
    - operator (a user's, ``trial_code.operators``): ``operator``, the ``module:function`` (or
      ``module:Template``) spec, and the function's keyword arguments.
    """

    name: str
    family: str
    shape: dict[str, Any] = field(hash=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Workload:
        return make(data["family"], name=data["name"], **data["shape"])


def make(family: str, name: str | None = None, **shape: Any) -> Workload:
    """Validate a shape for ``family`` and name it (by default from its numbers)."""
    if family not in FAMILIES:
        raise ValueError(f"workload family must be one of {FAMILIES}, got {family!r}")
    if family == "operator":
        return _operator(name, shape)
    if family in ("matmul", "batch_matmul"):
        shape.setdefault("batch", 1)
        shape.setdefault("layout", "NN")
        required = ("batch", "n", "m", "k")
        if family == "matmul" and (shape["batch"] != 1 or shape["layout"] != "NN"):
            raise ValueError("matmul takes neither batch nor layout; use batch_matmul")
        if shape["layout"] not in GEMM_LAYOUTS:
            raise ValueError(f"layout must be one of {GEMM_LAYOUTS}, got {shape['layout']!r}")
    else:
        shape.setdefault("batch", 1)
        shape.setdefault("stride", 1)
        shape.setdefault("padding", 0)
        shape.setdefault("kernel_w", shape.get("kernel_h"))
        required = ("batch", "in_channels", "height", "width", "out_channels", "kernel_h", "kernel_w", "stride")
    for key in required:
        value = shape.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"workload {family} shape '{key}' must be a positive int, got {value!r}")
    if family == "conv2d":
        if not isinstance(shape["padding"], int) or shape["padding"] < 0:
            raise ValueError(f"workload conv2d shape 'padding' must be an int >= 0, got {shape['padding']!r}")
        out_h, out_w = conv2d_output_hw(shape)
        if out_h < 1 or out_w < 1:
            raise ValueError(f"workload conv2d: the kernel does not fit the padded input ({out_h}x{out_w} output)")
    check_bytes(f"workload {family}", _float32_bytes(family, shape))
    if name is None:
        name = f"{family}_" + "_".join(f"{k}{v}" for k, v in shape.items())
    check_name("workload", name)
    return Workload(name, family, dict(shape))


def check_bytes(what: str, size: int) -> None:
    """ValueError naming ``what`` when its inputs and output take ``size`` bytes, past ``MAX_BYTES``."""
    if size > MAX_BYTES:
        raise ValueError(f"{what}: its inputs and output take {size / 2**30:.1f} GiB; at most "
                         f"{MAX_BYTES / 2**30:.0f} GiB")


def _float32_bytes(family: str, shape: dict[str, Any]) -> int:
    """The bytes of a built-in family's float32 inputs and output (the templates' ``compute``)."""
    if family in ("matmul", "batch_matmul"):
        n, m, k = shape["n"], shape["m"], shape["k"]
        return 4 * shape["batch"] * (n * k + k * m + n * m)
    out_h, out_w = conv2d_output_hw(shape)
    images = shape["batch"] * shape["in_channels"] * shape["height"] * shape["width"]
    weights = shape["out_channels"] * shape["in_channels"] * shape["kernel_h"] * shape["kernel_w"]
    return 4 * (images + weights + shape["batch"] * shape["out_channels"] * out_h * out_w)


def _operator(name: str | None, shape: dict[str, Any]) -> Workload:
    """A user's operator: the spec and its arguments checked (nothing imported here); named by
    default from the function and its arguments, shortened by a digest when too long."""
    from .operators import check_arguments, check_spec

    spec = check_spec(shape.get("operator"))
    arguments = check_arguments({k: v for k, v in shape.items() if k != "operator"})
    if name is None:
        name = spec.rpartition(":")[2] + "".join(f"_{k}{v}" for k, v in arguments.items())
        if not SAFE_NAME.fullmatch(name):
            digest = hashlib.sha256(repr(sorted(arguments.items())).encode()).hexdigest()[:10]
            name = f"{spec.rpartition(':')[2][:60]}_{digest}"
    check_name("workload", name)
    return Workload(name, "operator", {"operator": spec, **arguments})


def check_name(what: str, name: str) -> str:
    """``name``, or ValueError when it may not name a file or a word of a command (``SAFE_NAME``)."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise ValueError(f"{what} name {name!r} may hold only letters, digits, '_', '-' and '.' (at most 100, "
                         "not starting with '.' or '-')")
    return name


def conv2d_output_hw(shape: dict[str, Any]) -> tuple[int, int]:
    """H_out, W_out of paper appendix B.3."""
    s, p = shape["stride"], shape["padding"]
    return ((shape["height"] + 2 * p - shape["kernel_h"]) // s + 1,
            (shape["width"] + 2 * p - shape["kernel_w"]) // s + 1)


def _resnet18() -> dict[str, Workload]:
    # AutoTVM (Chen et al. 2018) table 1: H=W, IC, OC, K, S; padding keeps "same" (K // 2).
    table = [(224, 3, 64, 7, 2), (56, 64, 64, 3, 1), (56, 64, 64, 1, 1), (56, 64, 128, 3, 2),
             (56, 64, 128, 1, 2), (28, 128, 128, 3, 1), (28, 128, 256, 3, 2), (28, 128, 256, 1, 2),
             (14, 256, 256, 3, 1), (14, 256, 512, 3, 2), (14, 256, 512, 1, 2), (7, 512, 512, 3, 1)]
    return {
        f"R{i}": make("conv2d", name=f"R{i}", batch=1, in_channels=ic, height=hw, width=hw, out_channels=oc,
                      kernel_h=k, kernel_w=k, stride=s, padding=k // 2)
        for i, (hw, ic, oc, k, s) in enumerate(table, start=1)
    }


NAMED: dict[str, Workload] = {
    "MM1": make("matmul", name="MM1", n=512, k=1024, m=1024),
    "MM2": make("matmul", name="MM2", n=512, k=1024, m=4096),
    "MM3": make("matmul", name="MM3", n=512, k=4096, m=1024),
    # BMM1: X (960,128,128) @ Y (960,128,64); BMM2: X transposed first; BMM3: (128,64) @ (128,64)^T.
    "BMM1": make("batch_matmul", name="BMM1", batch=960, n=128, k=128, m=64, layout="NN"),
    "BMM2": make("batch_matmul", name="BMM2", batch=960, n=128, k=128, m=64, layout="TN"),
    "BMM3": make("batch_matmul", name="BMM3", batch=960, n=128, k=64, m=128, layout="NT"),
    "C1": make("conv2d", name="C1", batch=512, in_channels=3, height=227, width=227, out_channels=64,
               kernel_h=11, kernel_w=11, stride=4, padding=0),
    "C2": make("conv2d", name="C2", batch=512, in_channels=64, height=27, width=27, out_channels=192,
               kernel_h=5, kernel_w=5, stride=1, padding=2),
    **_resnet18(),
    # Small shapes for CPU quickstarts and tests: each finishes a trial in well under a second.
    "MM_small": make("matmul", name="MM_small", n=256, k=256, m=256),
    "BMM_small": make("batch_matmul", name="BMM_small", batch=8, n=64, k=64, m=32, layout="NN"),
    "C_small": make("conv2d", name="C_small", batch=1, in_channels=16, height=28, width=28, out_channels=32,
                    kernel_h=3, kernel_w=3, stride=1, padding=1),
}


def named_or_operator(name: str) -> Workload:
    """A named workload, or a user's operator by its ``module:function`` spec, at the function's
    default shape or at the ``KEY=VALUE`` words after it, as ``--shape`` takes them
    (``examples.operators:softmax rows=16384 cols=1024``): how the benchmark harness and the GPU
    campaign name the examples."""
    if ":" not in name:
        return lookup(name)
    spec, *pairs = name.split()
    return make("operator", operator=spec, **shape_arguments(pairs, f"workload {name!r}"))


def shape_arguments(pairs: list[str], what: str) -> dict[str, Any]:
    """``KEY=VALUE`` words as keyword arguments, each value an int, a float or a bool as JSON reads
    it, else the word itself; ValueError naming ``what`` for a word without ``=``."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise ValueError(f"{what} takes KEY=VALUE, got {pair!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        arguments[key] = value if isinstance(value, (int, float, bool)) else text
    return arguments


def lookup(name: str) -> Workload:
    try:
        return NAMED[name]
    except KeyError:
        from nni_opevo.suggest import unknown  # here: the package costs a second to import, a trial's worker never needs it

        raise ValueError(unknown("workload", name, NAMED)) from None
