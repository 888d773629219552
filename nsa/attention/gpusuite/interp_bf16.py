"""Make triton's interpreter honest about bfloat16, so bf16 kernels can be tested on CPU.

Owns `honest_bf16()`, a context manager that patches `triton.runtime.interpreter.InterpreterBuilder`
(the class every interpreted kernel's ops go through) and restores it on exit. The interpreter keeps
bf16 tensors as raw uint16 bits, and then (triton 3.6 and 3.9 alike):
- `tl.dot` multiplies those bits as integers, so any bf16 `tl.dot` is garbage;
- a float32 -> bf16 cast truncates the mantissa (round toward zero); the GPU rounds to nearest even
  (`cvt.rn.bf16.f32`), and the interpreter's own "rtne" path rounds ties away and drops the carry
  into the exponent;
- elementwise float ops on two bf16 operands run on the bits.
The patch computes each of those as the GPU does: operands widened exactly to float32 (a bf16 is the
top half of a float32), a float32 product/accumulation (what the tensor cores do for bf16 inputs), and
results rounded to nearest even. It changes nothing for other dtypes. Used by the tests'
`bf16_interpreter` fixture and by `scripts/gpu-suite.sh --interpret`; it must not be active on a GPU
(there is nothing to patch: compiled kernels do not use the interpreter).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> uint16 bf16 bits, rounded to nearest, ties to even (NaN stays NaN), as the GPU does."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)


@contextlib.contextmanager
def honest_bf16() -> Iterator[None]:
    """Patch the interpreter's bf16 dot, casts and elementwise ops for the duration of the block."""
    import triton.language as tl
    from triton.runtime import interpreter as interp

    cls = interp.InterpreterBuilder
    Handle = interp.TensorHandle
    saved = {name: cls.__dict__[name] for name in ("create_dot", "cast_impl", "create_fp_to_fp", "binary_op")}

    def is_bf16(h) -> bool:
        return h.dtype.scalar == tl.bfloat16

    def wide(h) -> np.ndarray:
        return bf16_bits_to_f32(h.data) if is_bf16(h) else h.data

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if not (is_bf16(a) or is_bf16(b)):
            return saved["create_dot"](self, a, b, d, input_precision, max_num_imprecise_acc)
        acc = np.matmul(wide(a).astype(np.float32), wide(b).astype(np.float32), dtype=np.float32)
        out = acc + wide(d).astype(np.float32)
        if is_bf16(d):
            return Handle(f32_to_bf16_bits(out), tl.bfloat16)
        return Handle(out.astype(d.data.dtype), d.dtype.scalar)

    def to_bf16(self, src, dst_type):
        # Any float source -> bf16: widen to float32 (exact for fp16/fp32), then round to nearest even.
        return Handle(f32_to_bf16_bits(wide(src).astype(np.float32)), dst_type.scalar)

    def cast_impl(self, src, dst_type):
        dst = dst_type.scalar
        if dst == tl.bfloat16 and src.dtype.scalar.is_floating() and not is_bf16(src):
            return to_bf16(self, src, dst_type)
        if is_bf16(src) and dst.is_floating() and dst != tl.bfloat16:
            return Handle(bf16_bits_to_f32(src.data).astype(interp._get_np_dtype(dst_type)), dst)
        return saved["cast_impl"](self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if dst_type.scalar == tl.bfloat16 and not is_bf16(src):
            return to_bf16(self, src, dst_type)
        if is_bf16(src) and dst_type.scalar != tl.bfloat16:
            return cast_impl(self, src, dst_type)
        return saved["create_fp_to_fp"](self, src, dst_type, rounding_mode)

    def binary_op(self, lhs, rhs, op):
        if not (is_bf16(lhs) and is_bf16(rhs)):
            return saved["binary_op"](self, lhs, rhs, op)
        out = op(bf16_bits_to_f32(lhs.data), bf16_bits_to_f32(rhs.data))
        if out.dtype == np.bool_:  # comparisons
            return Handle(out, tl.int1)
        return Handle(f32_to_bf16_bits(out), tl.bfloat16)

    patched = {
        "create_dot": create_dot,
        "cast_impl": cast_impl,
        "create_fp_to_fp": create_fp_to_fp,
        "binary_op": binary_op,
    }
    for name, fn in patched.items():
        setattr(cls, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(cls, name, fn)
