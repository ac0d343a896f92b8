"""Product quantization (`vq:w=W,L=L`): sub-vectors of w values, each the index of its nearest centroid."""

from __future__ import annotations

import numpy as np

from .base import Quantizer

KMEANS_ITERS = 10
# Rows per distance block in VQ assignment. Every block is padded to exactly this
# many rows, so each matmul has the same shape and a row's code cannot depend on
# which rows share its block (or on the chunk size the memory budget picked).
VQ_BLOCK_ROWS = 256
VQ_DIST_BYTES = 32 << 20  # the distance buffer of one block of rows against a group of codebooks


class ProductQuantizer(Quantizer):
    """Product quantization: P = ceil(dim / w) sub-vectors (the last zero-padded to w), each
    replaced by the index of its nearest centroid (Euclidean) in its own codebook of L.

    The codebooks are fitted by k-means on the sample: each part's centroids start
    at the sub-vectors of L different sample rows drawn with the seed, then up to
    KMEANS_ITERS rounds of assign and average (stopping early when no assignment
    changes); an empty cluster takes the sample sub-vector worst served so far.
    Euclidean assignment (BiFeat assigns by cosine) minimises the reconstruction error. On sparse
    data (base.DataShape) centroid 0 of every codebook is pinned to the zero vector, so an all-zero
    sub-vector decodes to exact zeros (the first of equally near centroids wins).
    """

    default_sample_rows = 50_000  # BiFeat fits its codebooks on at most 50k rows

    def __init__(self, dim: int, w: int, L: int):
        super().__init__(dim, f"vq:w={w},L={L}")
        self.w, self.L = w, L
        self.parts = -(-dim // w)
        self.bits = 8 if L <= 256 else 16
        self.symbols, self.levels, self.width = self.parts, L, w
        self.codebook = None  # float32 [parts, L, w]

    @property
    def _group(self) -> int:
        """Codebooks per distance matmul, so that one block's distances stay within VQ_DIST_BYTES."""
        return max(1, VQ_DIST_BYTES // (VQ_BLOCK_ROWS * self.L * 4))

    def _fixed_bytes(self) -> int:
        # Distance buffer, the padded block, the codebooks and their transposed copy.
        codebook = self.parts * self.L * self.w * 4
        return min(self._group, self.parts) * VQ_BLOCK_ROWS * self.L * 4 + VQ_BLOCK_ROWS * self.parts * self.w * 4 \
            + 2 * codebook

    def work_bytes(self, rows: int) -> int:
        # Input, its padded copy, int64 assignments.
        return rows * (12 * self.parts * self.w + 16 * self.parts) + self._fixed_bytes()

    def fit_bytes(self, rows: int) -> int:
        # Sample and padded copy, assignments and errors, bincount weights; float64 centroid sums.
        return rows * (8 * self.parts * self.w + 40 * self.parts) + self._fixed_bytes() \
            + 2 * self.parts * self.L * self.w * 8

    def _split(self, rows):
        """[n, dim] -> [n, parts, w], zero-padded."""
        x = np.zeros((rows.shape[0], self.parts * self.w), dtype=np.float32)
        x[:, :self.dim] = rows
        return x.reshape(-1, self.parts, self.w)

    def _assign(self, x, with_error=False):
        """Nearest centroid of every sub-vector: argmin |c|²/2 - x·c, in padded blocks of rows."""
        n, P, L = x.shape[0], self.parts, self.L
        codes = np.empty((n, P), dtype=np.int64)
        err = np.empty((n, P), dtype=np.float32) if with_error else None
        group = self._group
        cb_t = np.ascontiguousarray(self.codebook.transpose(0, 2, 1))
        half_norm = 0.5 * np.einsum("plw,plw->pl", self.codebook, self.codebook)
        block = np.zeros((P, VQ_BLOCK_ROWS, self.w), dtype=np.float32)
        dist = np.empty((min(group, P), VQ_BLOCK_ROWS, L), dtype=np.float32)
        for start in range(0, n, VQ_BLOCK_ROWS):
            m = min(VQ_BLOCK_ROWS, n - start)
            block[:, :m] = x[start:start + m].transpose(1, 0, 2)
            block[:, m:] = 0
            for g in range(0, P, group):
                d = dist[:min(group, P - g)]
                np.matmul(block[g:g + group], cb_t[g:g + group], out=d)
                np.subtract(half_norm[g:g + group, None, :], d, out=d)
                best = d.argmin(axis=2)
                codes[start:start + m, g:g + group] = best[:, :m].T
                if with_error:
                    low = np.take_along_axis(d, best[:, :, None], axis=2)[:, :m, 0].T
                    err[start:start + m, g:g + group] = 2 * low
        if with_error:
            err += np.einsum("npw,npw->np", x, x)
        return codes, err

    def _fit(self, sample, seed):
        x = self._split(sample)
        n, P, L = x.shape[0], self.parts, self.L
        rng = np.random.default_rng(seed)
        # Each part starts from its own L sample rows; with fewer rows than L, a
        # permutation of max(n, L) taken mod n still uses every row at least once.
        start = np.argsort(rng.random((P, max(n, L))), axis=1)[:, :L] % n
        self.codebook = np.ascontiguousarray(x[start, np.arange(P)[:, None]])
        pinned = 1 if self.shape.zero else 0
        self.codebook[:, :pinned] = 0
        flat_base = (np.arange(P) * L)[None, :]
        prev = None
        for _ in range(KMEANS_ITERS):
            codes, err = self._assign(x, with_error=True)
            if prev is not None and np.array_equal(codes, prev):
                break
            prev = codes
            flat = (codes + flat_base).ravel()
            counts = np.bincount(flat, minlength=P * L)
            sums = np.stack([np.bincount(flat, weights=x[:, :, j].ravel(), minlength=P * L)
                             for j in range(self.w)], axis=1)
            cb = self.codebook.reshape(P * L, self.w)
            full = counts > 0
            full.reshape(P, L)[:, :pinned] = False
            cb[full] = (sums[full] / counts[full, None]).astype(np.float32)
            for p in np.flatnonzero((counts.reshape(P, L) == 0).any(axis=1)):
                empty = np.flatnonzero(counts[p * L:(p + 1) * L] == 0)
                empty = empty[empty >= pinned]
                worst = np.argsort(-err[:, p], kind="stable")[:empty.size]
                self.codebook[p, empty[:worst.size]] = x[worst, p]
        self._set_codebook(self.codebook)

    def _symbols(self, rows):
        codes, _ = self._assign(self._split(rows))
        return codes.astype(np.uint8 if self.bits == 8 else np.uint16)

    def _state_layout(self):
        return {"codebook": ("float32", (self.parts, self.L, self.w))}

    def _state(self):
        return {"codebook": self.codebook}

    def _load(self, arrays):
        self._set_codebook(arrays["codebook"])

    def _set_codebook(self, codebook):
        self.codebook = np.ascontiguousarray(codebook, dtype=np.float32)
        self._lookup = self.codebook.reshape(self.parts * self.L, self.w)
        self._offsets = np.arange(self.parts, dtype=np.int64) * self.L
