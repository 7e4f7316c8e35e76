"""Human unit strings (``10mbit``, ``20ms``, ``1%``, ``64MiB``) parsed into SI numbers.

Rates become bits per second, durations seconds, percentages fractions in [0, 1], sizes bytes.
Every parser raises ``ValueError`` with a message that says what a valid value looks like.

A scenario's rates and durations need their unit: a bare ``rate: 10`` (Mininet's ``bw=10`` is
10 Mbit/s) or ``delay: 10`` is refused with the likely intent, never guessed. Only a run's recorded
scenario from before units were written out is read with bare numbers as SI (validation context
without ``{"units": "required"}``); ``Scenario.to_dict(units=True)`` writes the units back.
"""
from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, SerializationInfo, ValidationInfo, WrapSerializer

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

# Rate units as tc(8) reads them (case-insensitive): SI and IEC bits per second. tc reads the
# ``bps`` family (bps, kbps, mbps, ...) as *bytes* per second, which many people read as bits: those
# are refused with both readings spelled out, never guessed.
_RATE_UNITS = {
    "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 1024, "mibit": 1024**2, "gibit": 1024**3, "tibit": 1024**4,
}
_BYTE_RATES = {"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12,
               "kibps": 1024, "mibps": 1024**2, "gibps": 1024**3, "tibps": 1024**4}
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}


def _split(value: object, what: str, example: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a {what}; use e.g. {example}")
    if isinstance(value, (int, float)):
        num, unit = value, ""
    else:
        m = re.fullmatch(_NUM + r"\s*([a-zA-Z%]*)", str(value).strip())
        if not m:
            raise ValueError(f"{value!r} is not a {what}; use e.g. {example}")
        num, unit = m.group(1), m.group(2).lower()
    try:
        num = float(num)
    except OverflowError:   # an int beyond float's range
        num = math.inf
    if not math.isfinite(num):
        raise ValueError(f"{_short(value)} is not a finite {what}; use e.g. {example}")
    return num, unit


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


def _scaled(value: object, what: str, example: str, units: dict, unit_example: str) -> float:
    """``value`` in the base unit of ``units`` (a bare number is already in it)."""
    num, unit = _split(value, what, example)
    if unit and unit not in units:
        raise ValueError(f"{value!r} has unknown {what} unit {unit!r}; use one of "
                         f"{', '.join(units)}{unit_example}")
    return num * units.get(unit, 1)


def parse_rate(value: object) -> float:
    """Link rate in bits per second. A bare number is bits per second (a scenario field refuses one)."""
    num, unit = _split(value, "rate", "10mbit, 512kbit, 1gbit")
    if unit in _BYTE_RATES:
        as_tc = num * _BYTE_RATES[unit] * 8
        bits = unit[:-3] + "bit"
        raise ValueError(f"{value!r} is ambiguous: tc reads {unit!r} as bytes per second "
                         f"({fmt_rate(as_tc)}), many people as bits per second; write "
                         f"{_g(as_tc / (_RATE_UNITS[bits] or 1))}{bits} for tc's reading or "
                         f"{_g(num)}{bits} for {_g(num)} {bits}/s")
    rate = _scaled(value, "rate", "10mbit, 512kbit, 1gbit", _RATE_UNITS, " (e.g. 10mbit)")
    if rate <= 0:
        raise ValueError(f"rate {value!r} must be positive")
    return rate


def parse_duration(value: object) -> float:
    """Duration in seconds. A bare number is seconds (a scenario field refuses one)."""
    return float(_scaled(value, "duration", "20ms, 1.5s, 10min", _TIME_UNITS, " (e.g. 20ms)"))


def parse_fraction(value: object) -> float:
    """A probability or share in [0, 1]: ``1%`` → 0.01, ``0.3`` → 0.3."""
    num, unit = _split(value, "fraction", "0.3 or 30%")
    if unit not in ("", "%"):
        raise ValueError(f"{value!r} is not a fraction; use e.g. 0.3 or 30%")
    frac = num / 100.0 if unit == "%" else num
    if not 0.0 <= frac <= 1.0:
        raise ValueError(f"{value!r} is outside [0, 1] (0%..100%)")
    return frac


def _bare(value: object, info: ValidationInfo) -> bool:
    """``value`` is a number without a unit (not 0, which is 0 in any unit) where units are required."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0
            and (info.context or {}).get("units") == "required")


def _rate_field(value: object, info: ValidationInfo) -> float:
    if _bare(value, info):
        raise ValueError(f"{_short(value)} has no unit: a rate needs one (bit, kbit, mbit, gbit per "
                         f"second, as tc writes them); did you mean {_g(value)}mbit?")
    return parse_rate(value)


def _duration_field(value: object, info: ValidationInfo) -> float:
    if _bare(value, info):
        raise ValueError(f"{_short(value)} has no unit: a duration needs one (us, ms, s, min, h); "
                         f"did you mean {_g(value)}ms or {_g(value)}s?")
    return parse_duration(value)


def _number(x: float) -> str:
    """``x`` exactly, without a trailing ``.0``."""
    text = repr(float(x))
    return text.removesuffix(".0")


def _with_unit(unit: str):
    def write(value, handler, info: SerializationInfo):
        if value is not None and (info.context or {}).get("units") == "write":
            return _number(value) + unit
        return handler(value)
    return WrapSerializer(write, when_used="json")


# Field types of the scenario's models: a human string in, the SI number out (written back with its
# unit by ``Scenario.to_dict(units=True)``).
Rate = Annotated[float, BeforeValidator(_rate_field), _with_unit("bit")]
Duration = Annotated[float, BeforeValidator(_duration_field), _with_unit("s")]
Fraction = Annotated[float, BeforeValidator(parse_fraction)]


def _g(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def fmt_rate(bits_per_s: float) -> str:
    """A rate as tc would print it: ``80mbit``, ``512kbit``, ``300bit``."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g}{unit}"
    return f"{bits_per_s:g}bit"


def fmt_bytes(n: float) -> str:
    """Human-readable byte count (decimal MB, as network people count)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def plural(n: int, word: str) -> str:
    """``1 seed``, ``2 seeds``, ``0 seeds`` (English nouns that take an -s)."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"
