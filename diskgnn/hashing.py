"""Counter-based hashing and seeded permutations: values that are functions of (key, id) alone, so that
any slice of ids, computed in any order or process, agrees with every other (the synthetic generator's node
ids and labels, the edge split, the link batches' edge order)."""

from __future__ import annotations

import numpy as np

U64 = np.uint64
# splitmix64's increment and its finaliser's multipliers: every counter-based hash here and in native/ uses them
GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def mix64(x: np.ndarray, key: int) -> np.ndarray:
    """splitmix64's finaliser of x + key: a counter-based hash of uint64 values (the arithmetic wraps)."""
    with np.errstate(over="ignore"):
        z = x.astype(U64) + U64(key % 2**64)
        z = (z ^ (z >> U64(30))) * U64(MIX1)
        z = (z ^ (z >> U64(27))) * U64(MIX2)
    return z ^ (z >> U64(31))


def unit_interval(h: np.ndarray) -> np.ndarray:
    """A uniform 64-bit hash as a float64 in [0, 1) (its top 53 bits)."""
    return (h >> U64(11)).astype(np.float64) * 2.0**-53


class Bijection:
    """A keyed pseudo-random permutation of [0, n) and its inverse, vectorised.

    A 4-round Feistel network permutes [0, 4^h), the smallest such range holding n; values that land
    at n or beyond are sent through it again until they land inside (cycle walking, at most 4 passes
    on average), which restricts it to a permutation of [0, n). `keys`: one 63-bit key per round."""

    ROUNDS = 4

    def __init__(self, n: int, keys):
        bits = max(2, (n - 1).bit_length())
        self.half = U64((bits + 1) // 2)
        self.mask = U64((1 << int(self.half)) - 1)
        self.n = n
        self.keys = [int(k) for k in keys]
        assert len(self.keys) == self.ROUNDS

    def _rounds(self, x: np.ndarray, forward: bool) -> np.ndarray:
        left, right = x >> self.half, x & self.mask
        for key in (self.keys if forward else self.keys[::-1]):
            if forward:
                left, right = right, left ^ (mix64(right, key) & self.mask)
            else:
                left, right = right ^ (mix64(left, key) & self.mask), left
        return (left << self.half) | right

    def _walk(self, x: np.ndarray, forward: bool) -> np.ndarray:
        x = self._rounds(np.asarray(x).astype(U64), forward)
        outside = np.flatnonzero(x >= U64(self.n))
        while outside.size:
            x[outside] = self._rounds(x[outside], forward)
            outside = outside[x[outside] >= U64(self.n)]
        return x.astype(np.int64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._walk(x, True)

    def inverse(self, y: np.ndarray) -> np.ndarray:
        return self._walk(y, False)
