"""Byte and FLOP counts as people read them: one function for each, with the few styles
shardtypes prints them in. Pure Python, so that every layer can write a count the same way.

>>> [fmt_bytes(3 * 2**30, style) for style in BYTE_STYLES]
['3.0 GiB', '3.00 GiB', '3 GiB', '3 GiB (3221225472 bytes)']
>>> [fmt_flops(1.24e15, style) for style in FLOP_STYLES]
['1.2 PFLOP', '1.24 PFLOP']
"""

from __future__ import annotations

__all__ = ["fmt_bytes", "fmt_flops", "BYTE_STYLES", "FLOP_STYLES"]

# The styles, and who writes in each:
# - "tenths": one decimal, '3.0 GiB', '640 B': the plan's table and the reports' sentences;
# - "figures": three significant figures, zeros kept, '3.00 GiB', '17.5 MiB', '1002 KiB': the
#   plan's page and the terminal's memory bar, where sizes stand in columns;
# - "short": three significant figures, zeros dropped, '3 GiB', '1.24 TiB': the step time's
#   sentence of what bounds a step;
# - "exact": "short" and the count itself, '3 GiB (3221225472 bytes)', '512 bytes': the layout
#   layer's errors, where a user checks the figure against their own sums.
BYTE_STYLES = ("tenths", "figures", "short", "exact")
FLOP_STYLES = ("tenths", "short")

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_FLOP_PREFIXES = ((10**18, "E"), (10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def fmt_bytes(n: float, style: str = "tenths") -> str:
    """A byte count with a binary unit (KiB, MiB, ... PiB) in one of ``BYTE_STYLES``:

    >>> fmt_bytes(1.5 * 2**30), fmt_bytes(1.5 * 2**30, 'figures'), fmt_bytes(1.5 * 2**30, 'short')
    ('1.5 GiB', '1.50 GiB', '1.5 GiB')
    >>> fmt_bytes(640), fmt_bytes(640, 'exact'), fmt_bytes(-2048)
    ('640 B', '640 bytes', '-2.0 KiB')
    """
    _check_style("fmt_bytes", style, BYTE_STYLES)
    if n < 0:
        return "-" + fmt_bytes(-n, style)
    size, unit = n, _BYTE_UNITS[0]
    for larger in _BYTE_UNITS[1:]:
        if size < 1024:
            break
        size, unit = size / 1024, larger
    if unit == "B":
        return f"{n:.0f} B" if style == "tenths" else f"{int(n)} bytes" if style == "exact" else f"{int(n)} B"
    if style == "tenths":
        return f"{size:.1f} {unit}"
    if style == "figures":
        return f"{size:.2f} {unit}" if size < 10 else f"{size:.1f} {unit}" if size < 100 else f"{size:.0f} {unit}"
    short = f"{_three_figures(size)} {unit}"
    return short if style == "short" else f"{short} ({int(n)} bytes)"


def fmt_flops(n: float, style: str = "tenths") -> str:
    """A count of FLOPs with a decimal prefix (kFLOP, ... EFLOP) in one of ``FLOP_STYLES``:
    "tenths" (one decimal: the step cost's line) or "short" (three significant figures: the
    step time's sentence).

    >>> fmt_flops(9.1e15), fmt_flops(9.1e15, 'short'), fmt_flops(512)
    ('9.1 PFLOP', '9.1 PFLOP', '512 FLOP')
    """
    _check_style("fmt_flops", style, FLOP_STYLES)
    for scale, prefix in _FLOP_PREFIXES:
        if n >= scale:
            return f"{n / scale:.1f} {prefix}FLOP" if style == "tenths" else f"{_three_figures(n / scale)} {prefix}FLOP"
    return f"{n} FLOP" if style == "tenths" else f"{_three_figures(n)} FLOP"


def _three_figures(x: float) -> str:
    # ('%.3g' writes 999.7 as '1e+03': from there on, the whole number)
    return f"{x:.3g}" if x < 999.5 else f"{x:.0f}"


def _check_style(owner: str, style: object, styles: tuple[str, ...]) -> None:
    if style not in styles:
        raise ValueError(f"{owner}: style must be one of {', '.join(map(repr, styles))}, got {style!r}")
