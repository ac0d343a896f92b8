"""Bit packing of quantized symbols into code rows, and the decode units read from them."""

from __future__ import annotations

import numpy as np


def packed_bytes(symbols: int, bits: int) -> int:
    return -(-symbols * bits // 8)


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """[n, S] integers < 2**bits -> uint8 [n, packed_bytes(S, bits)].

    Symbol j of a row occupies bits [j*bits, (j+1)*bits) of the row read as one
    little-endian integer: for bits < 8, byte j*bits // 8, starting at bit
    (j*bits) % 8 counted from the least significant bit; 16-bit symbols are
    little-endian uint16. Unused high bits of a row's last byte are zero.
    """
    n, s = values.shape
    if bits == 8:
        return np.ascontiguousarray(values, dtype=np.uint8)
    if bits == 16:
        return np.ascontiguousarray(values, dtype="<u2").view(np.uint8).reshape(n, 2 * s)
    per = 8 // bits
    padded = np.zeros((n, packed_bytes(s, bits) * per), dtype=np.uint8)
    padded[:, :s] = values
    out = padded[:, 0::per].copy()
    for k in range(1, per):  # strided slices: much faster than a reduce over a short last axis
        out |= padded[:, k::per] << np.uint8(k * bits)
    return out


def unpack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of pack_bits, padding symbols included: [n, B] uint8 -> [n, B * 8 // bits]."""
    n = codes.shape[0]
    if bits == 8:
        return codes
    if bits == 16:
        return np.ascontiguousarray(codes).view("<u2").reshape(n, -1)
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return ((codes[:, :, None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(n, -1)


def units_numpy(codes: np.ndarray, bits: int) -> np.ndarray:
    """The decode units of code rows as int32: little-endian uint16 symbols (bits 16), else bytes."""
    codes = np.ascontiguousarray(codes)
    return (codes.view("<u2") if bits == 16 else codes).astype(np.int32)


def units_torch(codes, bits: int):
    """units_numpy in torch ops, on the codes' device. int32, not int64: widening to int64 took
    longer than the gather itself on a CPU."""
    if bits == 16:
        pairs = codes.reshape(codes.shape[0], -1, 2).int()
        return pairs[:, :, 0] | (pairs[:, :, 1] << 8)
    return codes.int()
