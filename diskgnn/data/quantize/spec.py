"""Quantizer specs as users write them (`sq4:p=1`, `lin8`, `vq:w=16,L=2048`): parsing and the canonical form."""

from __future__ import annotations

import re

from ...errors import DiskgnnError, UsageError

SQ_BITS = (1, 2, 4, 8, 16)
LIN_BITS = (4, 8)
SQ_DEFAULT_P = 0.5  # BiFeat's clip: |x| percentiles 0.5 and 99.5
VQ_DEFAULTS = {"w": 16, "L": 2048}  # BiFeat's recommended (w, L) for large graphs
MAX_VQ_L = 1 << 16  # codes are at most uint16
_SPEC_HELP = "expected sq1, sq2, sq4, sq8, sq16, lin4, lin8 or vq:w=W,L=L, with options after ':' (e.g. sq4:p=1)"

def parse_spec(text: str) -> tuple[str, int, dict]:
    """Parses a spec into (kind, bits, options): kind is 'sq', 'lin' or 'vq' (bits 0 for vq)."""
    s = str(text).strip()
    m = re.fullmatch(r"(sq|lin)(\d+)|(vq)", s.partition(":")[0])
    if not m:
        raise DiskgnnError(f"quantize spec {text!r}: {_SPEC_HELP}")
    kind = m.group(1) or "vq"
    bits = int(m.group(2)) if m.group(2) else 0
    if kind == "sq" and bits not in SQ_BITS:
        raise DiskgnnError(f"quantize spec {text!r}: sq bits must be one of {', '.join(map(str, SQ_BITS))}")
    if kind == "lin" and bits not in LIN_BITS:
        raise DiskgnnError(f"quantize spec {text!r}: lin bits must be one of {', '.join(map(str, LIN_BITS))}")
    allowed = {"sq": ("p",) if bits > 1 else (), "lin": ("p",), "vq": ("w", "L")}[kind]
    opts = {}
    rest = s.partition(":")[2]
    for item in rest.split(",") if rest else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise DiskgnnError(f"quantize spec {text!r}: {item!r} is not an option of {s.partition(':')[0]}"
                               f" (options: {', '.join(allowed) or 'none'})")
        if key in opts:
            raise DiskgnnError(f"quantize spec {text!r}: {key} given twice")
        try:
            opts[key] = float(value) if key == "p" else int(value)
        except ValueError:
            raise DiskgnnError(f"quantize spec {text!r}: {key}={value!r} is not a "
                               f"{'number' if key == 'p' else 'whole number'}") from None
    if "p" in opts and not 0 <= opts["p"] < 50:
        raise DiskgnnError(f"quantize spec {text!r}: p={opts['p']:g} must be in [0, 50)")
    if kind == "sq" and bits > 1:
        opts.setdefault("p", SQ_DEFAULT_P)
    if kind == "lin":
        opts.setdefault("p", 0.0)
    if kind == "vq":
        opts = {**VQ_DEFAULTS, **opts}
        if opts["w"] < 1:
            raise DiskgnnError(f"quantize spec {text!r}: w={opts['w']} must be at least 1")
        if not 2 <= opts["L"] <= MAX_VQ_L:
            raise DiskgnnError(f"quantize spec {text!r}: L={opts['L']} must be in [2, {MAX_VQ_L}]")
    return kind, bits, opts


def canonical_spec(text: str, option: str | None = None) -> str:
    """The one spelling of a spec: defaults dropped for sq/lin, always spelled out for vq. With `option`
    (the flag that gave it), a bad spec is a UsageError naming the flag."""
    try:
        kind, bits, opts = parse_spec(text)
    except DiskgnnError as e:
        if option is None:
            raise
        raise UsageError(f"{option} {text}: {str(e).removeprefix(f'quantize spec {text!r}: ')}") from None
    if kind == "vq":
        return f"vq:w={opts['w']},L={opts['L']}"
    default = SQ_DEFAULT_P if kind == "sq" else 0.0
    return f"{kind}{bits}" + (f":p={opts['p']:g}" if bits > 1 and opts["p"] != default else "")


def spec_slug(spec: str) -> str:
    """File-name form of a spec: vq:w=16,L=2048 -> vq-w16-L2048."""
    return canonical_spec(spec).replace(":", "-").replace(",", "-").replace("=", "")
