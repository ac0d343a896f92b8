"""Bit packing of symbols into code rows, against the layout docs/quantization.md states."""

import numpy as np
import pytest

from diskgnn.data.quantize.bits import pack_bits, unpack_bits


def oracle_pack(values, bits):
    """The layout as docs/quantization.md states it: symbol j in bits [j*bits, (j+1)*bits) of the row
    read as one little-endian integer, built from a bit string."""
    out = []
    for row in values:
        stream = "".join(format(int(v), f"0{bits}b")[::-1] for v in row)  # least significant bit first
        stream += "0" * (-len(stream) % 8)
        out.append([int(stream[i:i + 8][::-1], 2) for i in range(0, len(stream), 8)])
    return np.array(out, dtype=np.uint8)


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("n,symbols", [(1, 1), (199, 33), (1, "4097 bytes")])
def test_bit_pack_round_trip_and_layout(bits, n, symbols):
    if symbols == "4097 bytes":  # a row of 4097 bytes, with padding bits wherever bits < 8
        symbols = 4097 * 8 // bits - (bits < 8)
    rng = np.random.default_rng(bits)
    values = rng.integers(0, 1 << bits, (n, symbols)).astype(np.uint16 if bits == 16 else np.uint8)
    packed = pack_bits(values, bits)
    assert packed.dtype == np.uint8 and packed.shape == (n, -(-symbols * bits // 8))
    np.testing.assert_array_equal(packed, oracle_pack(values, bits))
    unpacked = unpack_bits(packed, bits)
    np.testing.assert_array_equal(unpacked[:, :symbols], values)
    assert not unpacked[:, symbols:].any()
