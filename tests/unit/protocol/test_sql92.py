"""SQL92 property filters, parsed and evaluated as RocketMQ's filter module does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import errors
from protocol.sql92 import (
    KEYS,
    MAX_NESTING,
    TAGS,
    FilterExpressionError,
    parse,
    visible_properties,
)

# (expression, properties, delivered?)
EVALUATIONS: list[tuple[str, dict[str, str], bool]] = [
    # = and <> against a string literal; a missing property is unknown either way
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "y"}, False),
    ("a = 'x'", {}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {"a": "x"}, False),
    ("a <> 'x'", {}, False),
    ("a = ''", {"a": ""}, True),
    # against an int literal the value is read as Integer.valueOf reads it
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "+5"}, True),
    ("a = 5", {"a": "005"}, True),
    ("a = 5", {"a": "5.0"}, False),  # not an int: evaluation error
    ("a = 5", {"a": " 5"}, False),  # Integer.valueOf does not trim
    ("a = 5", {"a": "x"}, False),
    ("a = 5", {"a": "3000000000"}, False),  # beyond int: evaluation error
    ("a = 5", {"a": "0" * 30 + "5"}, True),
    ("a = 5", {"a": "5" * 30}, False),
    ("a = 5", {"a": "\u0665"}, True),  # Character.digit reads any script's digits
    ("a = 3000000000", {"a": "3000000000"}, True),  # a long literal reads a long
    ("a = 10L", {"a": "10"}, True),
    ("a = -5", {"a": "-5"}, True),
    # against a decimal literal the value is read as Double.valueOf reads it
    ("a = 5.0", {"a": "5"}, True),
    ("a = 5.0", {"a": " 5.0 "}, True),  # Double.valueOf trims
    ("a = 5.0", {"a": "5e0"}, True),
    ("a = 5.0", {"a": "5d"}, True),
    ("a = 5.0", {"a": "0x1.4p2"}, True),
    ("a = .5", {"a": "0.5"}, True),
    ("a = 5.", {"a": "5"}, True),
    ("a = 5e0", {"a": "5"}, True),
    ("a = 5.0", {"a": "5_0"}, False),
    # against TRUE / FALSE the value is read as Boolean.valueOf reads it
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "anything"}, True),
    ("a = FALSE", {"a": "True"}, False),
    ("TRUE = a", {"a": "true"}, False),  # RocketMQ casts the wrong side: an error
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    # two properties compare as strings with =
    ("a = b", {"a": "1", "b": "1"}, True),
    ("a = b", {"a": "1", "b": "1.0"}, False),
    ("a = b", {"a": "1"}, False),
    ("a = b", {"b": "1"}, False),
    ("a = b", {}, True),  # RocketMQ: null = null is true
    ("a <> b", {"a": "3.14", "b": "3.141"}, True),
    # constants
    ("'x' = 'x'", {}, True),
    ("1 = 1.0", {}, True),
    ("1 = 1L", {}, True),
    ("1 = TRUE", {}, False),  # Integer and Boolean do not compare: not equal
    ("(a > 1) = TRUE", {"a": "2"}, True),
    ("(a > 1) = TRUE", {"a": "0"}, False),
    # > >= < <= against an int literal
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a > 5", {"a": "5.5"}, False),  # not an int: evaluation error
    ("a > 5", {}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a >= 5", {"a": "4"}, False),
    ("a < 5", {"a": "-10"}, True),
    ("a < 5", {"a": "5"}, False),
    ("a <= 5", {"a": "5"}, True),
    ("a <= 5", {"a": "6"}, False),
    ("5 < a", {"a": "6"}, True),
    ("a > 9223372036854775807", {"a": "9223372036854775808"}, False),
    ("a > -(-5)", {"a": "6"}, True),
    # ... against a decimal literal, with Double.compareTo's NaN and infinities
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5.0", {"a": "NaN"}, True),
    ("a < 5.0", {"a": "NaN"}, False),
    ("a > 5.0", {"a": "Infinity"}, True),
    ("a > 5.0", {"a": "-Infinity"}, False),
    ("a > 5.0", {"a": "0x1.8p2"}, True),
    ("a > 5.0", {"a": "0x1p99999"}, True),  # overflows to Infinity
    ("a > 5.0", {"a": "infinity"}, False),  # Java spells it Infinity
    ("a > 3.1E10", {"a": "3.1415E10"}, True),
    ("a < -0.5", {"a": "-1"}, True),
    # ... between two properties: both read as doubles
    ("a > b", {"a": "10", "b": "9.5"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "x", "b": "1"}, False),  # evaluation error
    ("a > b", {"a": "2"}, False),
    ("a > b", {"b": "2"}, False),
    ("a > -b", {"a": "1", "b": "2"}, False),  # -b is null
    ("1 < 3000000000", {}, True),
    ("2.5 > 2", {}, True),
    ("2 < 2.5", {}, True),
    # AND / OR with unknowns, and an evaluation error that ends evaluation
    ("a = 'x' AND b = 'y'", {"a": "x", "b": "y"}, True),
    ("a = 'x' AND b = 'y'", {"a": "x"}, False),
    ("a = 'x' OR b = 'y'", {"b": "y"}, True),
    ("a = 'x' OR b = 'y'", {}, False),
    ("a > 5 OR b = 'y'", {"b": "y"}, True),  # unknown OR true is true
    ("a > 5 OR b = 'y'", {"a": "zz", "b": "y"}, False),  # the error is not skipped
    ("b = 'y' OR a > 5", {"a": "zz", "b": "y"}, True),  # OR stopped before the error
    ("b = 'n' AND a > 5", {"a": "zz", "b": "y"}, False),
    ("a IS NULL OR a = 'hello'", {}, True),
    ("a IS NULL OR a = 'hello'", {"a": "hello"}, True),
    ("a IS NULL OR a = 'hello'", {"a": "abc"}, False),
    ("a = 1 OR b = 2 OR c = 3", {"c": "3"}, True),
    ("a = 1 AND b = 2 AND c = 3", {"a": "1", "b": "2", "c": "3"}, True),
    ("a = 1 AND b = 2 AND c = 3", {"a": "1", "b": "2"}, False),
    # precedence: AND before OR, parentheses first
    ("a = 'x' OR b = 'y' AND c = 'z'", {"a": "x"}, True),
    ("a = 'x' OR b = 'y' AND c = 'z'", {"b": "y"}, False),
    ("(a = 'x' OR b = 'y') AND c = 'z'", {"a": "x"}, False),
    ("(a = 'x' OR b = 'y') AND c = 'z'", {"a": "x", "c": "z"}, True),
    ("((a = 'x'))", {"a": "x"}, True),
    # NOT
    ("NOT (a = 'x')", {"a": "y"}, True),
    ("NOT (a = 'x')", {"a": "x"}, False),
    ("NOT (a = 'x')", {}, False),  # not unknown is unknown
    ("NOT NOT (a = 'x')", {"a": "x"}, True),
    ("NOT a = 'x'", {"a": "x"}, False),  # (NOT a) = 'x': a Boolean against a String
    ("NOT a = 'x'", {"a": "y"}, False),
    ("NOT a", {"a": "x"}, True),  # a present property casts to false
    ("NOT a", {}, False),
    ("a", {"a": "true"}, False),
    # boolean and null literals
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, False),
    ("NOT FALSE", {}, True),
    ("NOT NULL", {}, False),
    # IS [NOT] NULL
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IS NOT NULL", {}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("-a IS NULL", {"a": "5"}, True),  # only numbers negate
    ("(a = 5) IS NULL", {}, True),
    # [NOT] BETWEEN
    ("a BETWEEN 2 AND 10", {"a": "2"}, True),
    ("a BETWEEN 2 AND 10", {"a": "10"}, True),
    ("a BETWEEN 2 AND 10", {"a": "11"}, False),
    ("a BETWEEN 2 AND 10", {"a": "x"}, False),
    ("a BETWEEN 2 AND 10", {}, False),
    ("a NOT BETWEEN 2 AND 10", {"a": "1"}, True),
    ("a NOT BETWEEN 2 AND 10", {"a": "5"}, False),
    ("a NOT BETWEEN 2 AND 10", {}, False),
    ("a BETWEEN 1.5 AND 2.0", {"a": "1.75"}, True),
    ("a BETWEEN 1.5 AND 2", {"a": "1.75"}, False),  # 1.75 is no Integer
    ("a BETWEEN b AND c", {"a": "5", "b": "1", "c": "9"}, True),
    ("a BETWEEN -3 AND -1", {"a": "-2"}, True),
    ("a BETWEEN 1 AND 2 AND b = 3", {"a": "1", "b": "3"}, True),
    # [NOT] IN
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a IN ('x', 'y')", {}, False),
    ("a NOT IN ('x')", {"a": "z"}, True),
    ("a NOT IN ('x')", {"a": "x"}, False),
    ("a NOT IN ('x')", {}, False),
    ("a IN ('it''s')", {"a": "it's"}, True),
    ("+a IN ('x')", {"a": "x"}, True),
    ("a not in ('4', '4', '5') and b between 3 and 10", {"a": "3", "b": "4"}, True),
    # [NOT] CONTAINS / STARTSWITH / ENDSWITH
    ("a CONTAINS 'bc'", {"a": "abcd"}, True),
    ("a CONTAINS 'bc'", {"a": "abd"}, False),
    ("a STARTSWITH 'ab'", {"a": "abcd"}, True),
    ("a STARTSWITH 'bc'", {"a": "abcd"}, False),
    ("a ENDSWITH 'cd'", {"a": "abcd"}, True),
    ("a ENDSWITH 'bc'", {"a": "abcd"}, False),
    ("a NOT CONTAINS 'bc'", {"a": "xyz"}, True),
    ("a NOT CONTAINS 'bc'", {"a": "abc"}, False),
    ("a NOT STARTSWITH 'x'", {"a": "abc"}, True),
    ("a NOT ENDSWITH 'c'", {"a": "abc"}, False),
    ("a CONTAINS 'x'", {}, False),
    ("a NOT CONTAINS 'x'", {}, False),  # missing: false, not the opposite
    ("NOT (a CONTAINS 'x')", {}, True),  # ... so its NOT is true
    ("a CONTAINS ''", {"a": "x"}, False),
    ("a NOT CONTAINS ''", {"a": "x"}, False),
    ("a NOT STARTSWITH ''", {"a": "x"}, False),
    ("(a > 1) CONTAINS 'x'", {"a": "2"}, False),  # a Boolean is no String
    ("5 NOT CONTAINS 'x'", {}, False),
    ("'axb' contains 'x'", {}, True),
    ("' ' startswith ' '", {}, True),
    ("'s' endswith '\\'", {}, False),
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    # lexing: keywords in any case, comments, names
    ("a = 1 aNd b = 2", {"a": "1", "b": "2"}, True),
    ("a=1and b=2", {"a": "1", "b": "2"}, True),
    ("a = 1 -- a note\n AND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 /* a * note */ AND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1\r\n\tAND\fb = 2", {"a": "1", "b": "2"}, True),
    ("$x_1 = 'y'", {"$x_1": "y"}, True),
    ("A = 'x'", {"a": "x"}, False),  # names are case-sensitive
    ("android = 'x'", {"android": "x"}, True),
    ("a = 'line\nbreak'", {"a": "line\nbreak"}, True),
    ("a > --5", {"a": "6"}, True),  # "--" without a line break is two minus signs
]


@pytest.mark.parametrize(("expression", "properties", "delivered"), EVALUATIONS)
def test_expressions_evaluate_as_rocketmq_does(
    expression: str, properties: dict[str, str], delivered: bool
) -> None:
    assert parse(expression).matches(properties) is delivered


# (expression, line, column, a part of the reason)
REFUSALS: list[tuple[str, int, int, str]] = [
    ("", 1, 1, "unexpected end of the expression; expected one of: '(', '+', '-', FALSE"),
    ("   ", 1, 4, "unexpected end of the expression"),
    ("a >", 1, 4, "unexpected end of the expression"),
    ("(a = 1", 1, 7, "expected one of: ')', OR"),
    ("a = 5 andx = 3", 1, 7, "unexpected property name 'andx'"),
    ("a = 1\n  OR OR", 2, 6, "unexpected OR"),
    ("a IN ()", 1, 7, "unexpected ')'; expected string literal"),
    ("a IN (1)", 1, 7, "unexpected integer '1'; expected string literal"),
    ("a IN ('x' 'y')", 1, 11, "expected one of: ')', ','"),
    ("a CONTAINS b", 1, 12, "expected string literal"),
    ("a CONTAINS", 1, 11, "expected string literal"),
    ("a = 007", 1, 6, "unexpected integer '0'"),
    ("a = 0L", 1, 6, "unexpected property name 'L'"),
    ("a = 1 --c", 1, 7, "unexpected '-'"),
    ("a = 1 !", 1, 7, "unexpected character '!'"),
    ("a != 1", 1, 3, "unexpected character '!'"),
    ("a = 1 /* open", 1, 7, "unexpected character '/'"),
    ("a = 'x", 1, 5, "without its closing quote"),
    ("a == 1", 1, 4, "unexpected '='"),
    ("a IS 5", 1, 6, "expected one of: NOT, NULL"),
    ("in = 'x'", 1, 1, "unexpected IN"),
    ("a = NULL", 1, 5, "NULL cannot be compared with '=' or '<>'; use IS NULL"),
    ("NULL <> a", 1, 1, "NULL cannot be compared"),
    ("TRUE = 'x'", 1, 1, "'TRUE' cannot be compared with \"'x'\""),
    ("a > 'x'", 1, 5, "\"'x'\" cannot be compared with '>'"),
    ("a >= TRUE", 1, 6, "'TRUE' cannot be compared with '>='"),
    ("NULL < a", 1, 1, "'NULL' cannot be compared with '<'"),
    ("(a = 1) <= 5", 1, 2, "'a = 1' cannot be compared with '<='"),
    ("NOT a > 5", 1, 1, "NOT binds tighter than comparisons"),
    ("a BETWEEN 10 AND 0", 1, 11, "BETWEEN bounds are out of order: 10 > 0"),
    ("a BETWEEN 2.5 AND 2", 1, 11, "out of order"),
    ("a BETWEEN NULL AND 5", 1, 11, "BETWEEN bounds cannot be NULL"),
    ("a BETWEEN 'a' AND 'b'", 1, 11, "\"'a'\" cannot be compared with 'BETWEEN'"),
    ("a NOT BETWEEN 1 AND TRUE", 1, 21, "cannot be compared with 'NOT BETWEEN'"),
    ("'x' IN ('a')", 1, 1, "IN needs a property on its left"),
    ("(a = 1) NOT IN ('a')", 1, 2, "IN needs a property on its left"),
    ("5", 1, 1, "'5' is not a condition"),
    ("'x'", 1, 1, "is not a condition"),
    ("-a", 1, 1, "'-a' is not a condition"),
    ("a = 1 AND 5", 1, 11, "'5' is not a condition"),
    ("NOT 'x'", 1, 5, "is not a condition"),
    ("a = 0.0", 1, 5, "decimal 0.0 is zero or too small"),
    ("a = 1e-400", 1, 5, "is zero or too small"),
    ("a = 1e999", 1, 5, "decimal 1e999 is too large"),
    ("a > 9223372036854775808", 1, 5, "integer 9223372036854775808 is out of the 64-bit range"),
    ("a > " + "1" * 5000, 1, 5, "is out of the 64-bit range"),
    ("NOT " * (MAX_NESTING + 1) + "a", 1, MAX_NESTING * 4 + 1, "nests deeper than"),
]


@pytest.mark.parametrize(("expression", "line", "column", "reason"), REFUSALS)
def test_bad_expressions_are_refused_with_their_position(
    expression: str, line: int, column: int, reason: str
) -> None:
    with pytest.raises(FilterExpressionError) as caught:
        parse(expression)
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert reason in error.reason
    assert str(error) == f"invalid SQL92 expression at line {line}, column {column}: {error.reason}"


def test_a_syntax_error_names_what_was_expected() -> None:
    with pytest.raises(FilterExpressionError) as caught:
        parse("a IN ('x' 'y')")
    assert caught.value.expected == ("')'", "','")


def test_a_refusal_carries_the_illegal_filter_expression_code() -> None:
    with pytest.raises(FilterExpressionError) as caught:
        parse("a >")
    assert caught.value.code is errors.ILLEGAL_FILTER_EXPRESSION
    assert not caught.value.retriable
    assert errors.by_number(errors.ILLEGAL_FILTER_EXPRESSION.number).name == (
        "ILLEGAL_FILTER_EXPRESSION"
    )


def test_a_long_chain_of_or_is_flattened_not_nested() -> None:
    terms = [f"a = '{n}'" for n in range(2000)]
    sql_filter = parse(" OR ".join(terms))
    assert sql_filter.matches({"a": "1999"})
    assert not sql_filter.matches({"a": "2000"})


def test_parentheses_do_not_count_as_nesting() -> None:
    depth = MAX_NESTING * 3
    assert parse("(" * depth + "a = 1" + ")" * depth).matches({"a": "1"})


def test_parsed_filters_are_cached_and_compare_by_expression() -> None:
    assert parse("a = 1") is parse("a = 1")
    assert parse("a = 1") != parse("a=1")
    assert parse("a = 1").expression == "a = 1"


def test_visible_properties_add_the_tag_and_the_keys() -> None:
    visible = visible_properties([("color", "red")], "vip", ["k1", "k2"])
    assert visible == {"color": "red", TAGS: "vip", KEYS: "k1 k2"}
    assert visible_properties([("color", "red")], "", []) == {"color": "red"}
    assert parse("TAGS IN ('vip') AND KEYS CONTAINS 'k2'").matches(visible)
    assert not parse("TAGS IS NOT NULL").matches(visible_properties((), "", ()))


# -- properties -------------------------------------------------------------------

INT_LITERALS = st.integers(min_value=-50, max_value=50).map(str)
BOUND_LITERALS = st.one_of(INT_LITERALS, st.integers(-100, 100).map(lambda n: f"{n + 0.5}"))
NUMERIC_VALUES = st.one_of(
    st.integers(-60, 60).map(str),
    st.integers(-120, 120).map(lambda n: str(n / 2)),
    st.sampled_from(["x", "", "NaN", "1e2", " 3", "Infinity", "-0"]),
)


@given(value=NUMERIC_VALUES, bounds=st.lists(BOUND_LITERALS, min_size=2, max_size=2))
def test_between_is_two_comparisons(value: str, bounds: list[str]) -> None:
    low, high = sorted(bounds, key=float)
    for properties in ({"a": value}, {}):
        between = parse(f"a BETWEEN {low} AND {high}").matches(properties)
        assert between == parse(f"a >= {low} AND a <= {high}").matches(properties)
        not_between = parse(f"a NOT BETWEEN {low} AND {high}").matches(properties)
        assert not_between == parse(f"a < {low} OR a > {high}").matches(properties)


@given(value=st.integers(-(2**40), 2**40), literal=st.integers(0, 2**33))
def test_an_int_literal_reads_the_property_as_its_java_type(value: int, literal: int) -> None:
    """An int literal reads an Integer (a value beyond it is an error); a
    larger literal is a Long and reads a Long."""
    readable = literal > 2**31 - 1 or -(2**31) <= value <= 2**31 - 1
    assert parse(f"a > {literal}").matches({"a": str(value)}) is (readable and value > literal)
    assert parse(f"a = {literal}").matches({"a": str(value)}) is (readable and value == literal)


@given(
    value=st.floats(allow_nan=False, allow_infinity=False),
    literal=st.floats(min_value=1e-300, max_value=1e300),
)
def test_a_decimal_literal_reads_the_property_as_a_double(value: float, literal: float) -> None:
    assert parse(f"a < {literal!r}").matches({"a": repr(value)}) is (value < literal)
    assert parse(f"a >= -{literal!r}").matches({"a": repr(value)}) is (value >= -literal)


@given(text=st.text())
def test_a_string_literal_reads_back_its_text(text: str) -> None:
    quoted = "'" + text.replace("'", "''") + "'"
    sql_filter = parse(f"a = {quoted}")
    assert sql_filter.matches({"a": text})
    assert not sql_filter.matches({"a": text + "x"})
    assert parse(f"a IN ({quoted}, 'other')").matches({"a": text})


Reference = Callable[[dict[str, int]], bool]


def comparisons() -> st.SearchStrategy[tuple[str, Reference]]:
    """A comparison of property a or b with an int literal, with its meaning."""
    tests: dict[str, Callable[[int, int], bool]] = {
        "=": lambda v, n: v == n,
        "<>": lambda v, n: v != n,
        ">": lambda v, n: v > n,
        ">=": lambda v, n: v >= n,
        "<": lambda v, n: v < n,
        "<=": lambda v, n: v <= n,
    }

    def build(name: str, symbol: str, n: int) -> tuple[str, Reference]:
        test = tests[symbol]
        return f"{name} {symbol} {n}", lambda values: test(values[name], n)

    return st.builds(build, st.sampled_from("ab"), st.sampled_from(sorted(tests)), INT_VALUES)


INT_VALUES = st.integers(-5, 5)


def combine(
    children: st.SearchStrategy[tuple[str, Reference]],
) -> st.SearchStrategy[tuple[str, Reference]]:
    def both(
        operator: str, left: tuple[str, Reference], right: tuple[str, Reference]
    ) -> tuple[str, Reference]:
        left_text, left_test = left
        right_text, right_test = right
        if operator == "AND":
            return f"({left_text}) AND ({right_text})", lambda v: left_test(v) and right_test(v)
        return f"({left_text}) OR ({right_text})", lambda v: left_test(v) or right_test(v)

    def negated(inner: tuple[str, Reference]) -> tuple[str, Reference]:
        text, test = inner
        return f"NOT ({text})", lambda v: not test(v)

    return st.one_of(
        st.builds(both, st.sampled_from(["AND", "OR"]), children, children),
        st.builds(negated, children),
    )


CONDITIONS = st.recursive(comparisons(), combine, max_leaves=8)


@given(condition=CONDITIONS, a=INT_VALUES, b=INT_VALUES)
def test_with_every_property_present_logic_is_two_valued(
    condition: tuple[str, Reference], a: int, b: int
) -> None:
    text, reference = condition
    properties = {"a": str(a), "b": str(b)}
    expected = reference({"a": a, "b": b})
    assert parse(text).matches(properties) is expected
    assert parse(f"NOT ({text})").matches(properties) is (not expected)


TOKENS = [
    "a", "b", "'x'", "1", "2.5", "TRUE", "FALSE", "NULL", "AND", "OR", "NOT", "=", "<>",
    ">", ">=", "<", "<=", "(", ")", "IS", "IN", "BETWEEN", "CONTAINS", "STARTSWITH", ",",
    "-", "+", "!", "--", "\n",
]  # fmt: skip
PROPERTY_VALUES = st.sampled_from(["1", "x", "true", "2.5", "NaN", "", "-3"])


@given(
    tokens=st.lists(st.sampled_from(TOKENS), max_size=12),
    properties=st.dictionaries(st.sampled_from("ab"), PROPERTY_VALUES),
)
def test_any_text_parses_or_is_refused_and_evaluation_never_raises(
    tokens: list[str], properties: dict[str, str]
) -> None:
    text = " ".join(tokens)
    refusal: FilterExpressionError | None = None
    try:
        sql_filter = parse(text)
    except FilterExpressionError as error:
        refusal = error
    if refusal is None:
        assert sql_filter.matches(properties) in (True, False)
    else:
        assert 1 <= refusal.line <= text.count("\n") + 1
        assert 1 <= refusal.column <= len(text) + 1
