"""Quantizer specs: spellings, canonical forms, file slugs, refusals, code sizes."""

import re

import pytest

from diskgnn.data.quantize.quantizers import make_quantizer
from diskgnn.data.quantize.spec import canonical_spec, parse_spec, spec_slug
from diskgnn.errors import DiskgnnError


@pytest.mark.parametrize("spec,canonical,slug", [
    ("sq4", "sq4", "sq4"), ("sq4:p=0.5", "sq4", "sq4"), ("sq4:p=1.0", "sq4:p=1", "sq4-p1"),
    ("lin8:p=0", "lin8", "lin8"), ("lin4:p=0.25", "lin4:p=0.25", "lin4-p0.25"),
    ("vq", "vq:w=16,L=2048", "vq-w16-L2048"), ("vq:L=256,w=8", "vq:w=8,L=256", "vq-w8-L256"),
])
def test_spec_spellings(spec, canonical, slug):
    assert canonical_spec(spec) == canonical and spec_slug(spec) == slug
    assert make_quantizer(spec, 10).spec == canonical


@pytest.mark.parametrize("spec,what", [
    ("sq3", "sq bits must be one of 1, 2, 4, 8, 16"), ("lin2", "lin bits must be one of 4, 8"),
    ("pq8", "expected sq1"), ("vq:w=0", "w=0 must be at least 1"), ("vq:L=1", "L=1 must be in [2, 65536]"),
    ("vq:L=70000", "must be in [2, 65536]"), ("vq:k=3", "'k=3' is not an option of vq (options: w, L)"),
    ("sq1:p=1", "not an option of sq1 (options: none)"), ("sq4:p=50", "p=50 must be in [0, 50)"),
    ("vq:w=a", "w='a' is not a whole number"), ("lin8:p=1,p=2", "p given twice"),
])
def test_bad_specs_name_the_problem(spec, what):
    with pytest.raises(DiskgnnError, match=re.escape(what)):
        parse_spec(spec)


def test_code_sizes_and_compression_for_128_values():
    expected = {"sq1": 16, "sq2": 32, "sq4": 64, "sq8": 128, "sq16": 256, "lin4": 64, "lin8": 128,
                "vq:w=16,L=256": 8, "vq:w=16,L=2048": 16, "vq:w=12,L=1024": 22}
    print("\nspec             bytes/row  vs float32 (128 values, 512 bytes)")
    for spec, size in expected.items():
        q = make_quantizer(spec, 128)
        assert q.code_bytes == size
        print(f"{spec:16} {q.code_bytes:9}  {q.compression_ratio:5.1f}x")
