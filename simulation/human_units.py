"""Human units for printed figures: a unit chosen to fit the amount (a 5-minute job is grams and
kilojoules, a year of nightly runs tonnes and kilowatt-hours), one unit per table column."""

from __future__ import annotations

__all__ = ["mass_unit", "energy_unit", "figure"]

_MASS = (("g", 1.0), ("kg", 1e3), ("t", 1e6))
_ENERGY = (("J", 1.0), ("kJ", 1e3), ("MJ", 1e6))
_KWH = 3.6e6


def mass_unit(grams: float) -> tuple[str, float]:
    """(unit, grams per unit) that shows ``grams`` as a number below 1000 (g, kg, t)."""
    unit, scale = _MASS[0]
    for unit_, scale_ in _MASS:
        if abs(grams) >= scale_:
            unit, scale = unit_, scale_
    return unit, scale


def energy_unit(joules: float) -> tuple[str, float]:
    """(unit, joules per unit): J, kJ, MJ, and kWh from 10 kWh on (where people read energy bills)."""
    if abs(joules) >= 10 * _KWH:
        return "kWh", _KWH
    unit, scale = _ENERGY[0]
    for unit_, scale_ in _ENERGY:
        if abs(joules) >= scale_:
            unit, scale = unit_, scale_
    return unit, scale


def figure(value: float, scale: float) -> str:
    """``value / scale`` with three significant digits (at least the integer part)."""
    x = value / scale
    if x == 0:
        return "0"
    digits = max(0, 2 - len(str(int(abs(x)))) + 1) if abs(x) >= 1 else 3
    return f"{x:.{digits}f}" if abs(x) >= 1 else f"{x:.3g}"
