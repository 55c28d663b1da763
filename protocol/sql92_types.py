"""Java values as RocketMQ's SQL92 filter converts and compares them.

RocketMQ evaluates a filter over Java objects: property values are Strings,
literals are Strings, Integers, Longs, Doubles and Booleans, and a comparison
of two classes converts one side (``ComparisonExpression.__compare``, with
string conversion on). This module holds those rules for ``protocol.sql92``,
which picks a comparator per comparison when it compiles an expression: the
class of every operand is known then (numbers only come from literals, a
property is a String, a condition a Boolean), so evaluation never dispatches
on types.

A conversion RocketMQ would fail on (``Integer.valueOf("5.5")``, a Boolean
cast to a String) raises :class:`EvaluationFailed`; the filter then does not
match the message, as the broker skips a message whose evaluation throws.

PURE.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable

# A value during evaluation: a Java String, Boolean, Integer/Long (int),
# Double (float) or null (None).
Value = str | bool | int | float | None
Compare = Callable[[Value, Value], int]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
LONG_DIGITS = 19  # no Java long has more significant digits
_INT_DIGITS = 10  # nor any Java int


class EvaluationFailed(Exception):
    """Raised where RocketMQ's evaluation throws; the message does not match."""


class JavaType(enum.Enum):
    """The Java class of an operand's non-null values, known when compiling."""

    STRING = "String"
    BOOLEAN = "Boolean"
    INTEGER = "Integer"
    LONG = "Long"
    DOUBLE = "Double"
    NULL = "null"  # the operand is always null


NUMBERS = (JavaType.INTEGER, JavaType.LONG, JavaType.DOUBLE)
INTEGRALS = (JavaType.INTEGER, JavaType.LONG)


def _read_integral(text: str, maximum: int) -> int:
    """``Integer.valueOf`` / ``Long.valueOf``: a sign, decimal digits (of any script), in range."""
    sign = text[:1]
    digits = text[1:] if sign in ("+", "-") else text
    if not digits.isdecimal():
        raise EvaluationFailed
    significant = digits.lstrip("0")
    if len(significant) > LONG_DIGITS:
        raise EvaluationFailed
    value = int(significant) if significant else 0
    if sign == "-":
        value = -value
    if not -maximum - 1 <= value <= maximum:
        raise EvaluationFailed
    return value


def read_int(text: str) -> int:
    """``Integer.valueOf``."""
    if len(text) < _INT_DIGITS and text.isascii() and text.isdigit():
        return int(text)  # the common case: at most 9 ASCII digits always fit
    return _read_integral(text, INT_MAX)


def read_long(text: str) -> int:
    """``Long.valueOf``."""
    if len(text) < LONG_DIGITS and text.isascii() and text.isdigit():
        return int(text)  # at most 18 ASCII digits always fit
    return _read_integral(text, LONG_MAX)


# Java's Double.valueOf: blanks (chars <= ' ') trimmed, a sign, then NaN,
# Infinity, a decimal or a hexadecimal float, with an optional f/d suffix.
_JAVA_BLANKS = "".join(map(chr, range(33)))
_JAVA_DOUBLE = re.compile(
    r"(?P<sign>[+-]?)(?:(?P<special>NaN|Infinity)"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
    r"|(?P<decimal>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)"
)


def read_double(text: str) -> float:
    """``Double.valueOf``; anything else it would refuse raises."""
    match = _JAVA_DOUBLE.fullmatch(text.strip(_JAVA_BLANKS))
    if match is None:
        raise EvaluationFailed
    special, hexadecimal, decimal = match.group("special", "hex", "decimal")
    if special:
        value = math.nan if special == "NaN" else math.inf
    elif hexadecimal:
        try:
            value = float.fromhex(hexadecimal)
        except OverflowError:
            value = math.inf
    else:
        value = float(decimal)
    return -value if match.group("sign") == "-" else value


def read_boolean(text: str) -> bool:
    """``Boolean.valueOf``: true iff the text is ``true`` in any case; never fails."""
    return text.lower() == "true"


# How a String is read as each class it is compared with.
READERS: dict[JavaType, Callable[[str], Value]] = {
    JavaType.INTEGER: read_int,
    JavaType.LONG: read_long,
    JavaType.DOUBLE: read_double,
    JavaType.BOOLEAN: read_boolean,
}


def compare_natural(left: Value, right: Value) -> int:
    """``compareTo`` of two Integers, Longs, Strings or Booleans (false < true)."""
    return (left > right) - (left < right)  # type: ignore[operator]


def compare_doubles(left: Value, right: Value) -> int:
    """``Double.compareTo``: NaN equals itself and exceeds everything; -0.0 < 0.0."""
    assert isinstance(left, float)
    assert isinstance(right, float)
    if left < right:
        return -1
    if left > right:
        return 1
    if left == right:
        left_sign, right_sign = math.copysign(1.0, left), math.copysign(1.0, right)
        return (left_sign > right_sign) - (left_sign < right_sign)
    return math.isnan(left) - math.isnan(right)


def _compare_as_doubles(left: Value, right: Value) -> int:
    """Two property values under ``>``-family operators: both must read as doubles."""
    return compare_doubles(read_double(left), read_double(right))  # type: ignore[arg-type]


def _compare_incomparable(left: Value, right: Value) -> int:
    """RocketMQ's answer for classes it cannot convert between (e.g. Integer and Boolean)."""
    return -1


def _compare_class_cast(left: Value, right: Value) -> int:
    """Boolean against String: RocketMQ's conversion casts the wrong side and throws."""
    raise EvaluationFailed


def comparator(left: JavaType, right: JavaType, *, ordering: bool) -> Compare:
    """How RocketMQ compares values of these classes (``ComparisonExpression.__compare``).

    The side of another class is converted: a String is read as the other
    side's Boolean / Integer / Long / Double, an Integer widens to a Long, an
    integral to a Double. ``ordering`` (``>``-family operators) reads two
    Strings as Doubles. Conversions that fail raise :class:`EvaluationFailed`.
    """
    string = JavaType.STRING
    if left is right:
        if left is string and ordering:
            return _compare_as_doubles
        return compare_doubles if left is JavaType.DOUBLE else compare_natural
    if left is JavaType.BOOLEAN and right is string:
        return _compare_class_cast
    if left is string and right in READERS:
        read, compare = READERS[right], comparator(right, right, ordering=False)
        return lambda lv, rv: compare(read(lv), rv)  # type: ignore[arg-type]
    if right is string and left in NUMBERS:
        read, compare = READERS[left], comparator(left, left, ordering=False)
        return lambda lv, rv: compare(lv, read(rv))  # type: ignore[arg-type]
    if left in INTEGRALS and right in INTEGRALS:
        return compare_natural
    if left is JavaType.DOUBLE and right in INTEGRALS:
        return lambda lv, rv: compare_doubles(lv, float(rv))  # type: ignore[arg-type]
    if right is JavaType.DOUBLE and left in INTEGRALS:
        return lambda lv, rv: compare_doubles(float(lv), rv)  # type: ignore[arg-type]
    return _compare_incomparable
