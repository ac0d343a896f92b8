"""Feature matrices and fitted quantizers the quantize tests share."""

import numpy as np

from diskgnn.data.quantize.quantizers import make_quantizer

SPECS = ["sq1", "sq2", "sq4", "sq8", "sq16", "lin4", "lin8", "lin8:p=1", "vq:w=4,L=16", "vq:w=5,L=300"]


def features(n=199, d=33, seed=0):
    """Awkward features: mixed signs and scales, a heavy tail, two all-zero columns (from 5 values)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * rng.uniform(0.01, 3, d)
    x[:, 0] = rng.standard_cauchy(n)
    if d >= 5:
        x[:, [3, d - 1]] = 0
    return x.astype(np.float32)


def fitted(spec, x, seed=0):
    return make_quantizer(spec, x.shape[1]).fit(x, seed=seed)
