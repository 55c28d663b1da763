"""The SQL92 table the official-client tests run: messages, expressions, expected matches.

Plain data shared by the test and the client script (which runs in its own
interpreter). Expected matches are written by hand from RocketMQ's rules (a
missing property is unknown, so no match, except ``IS NULL``).
"""

from __future__ import annotations

MESSAGES: list[tuple[str | None, dict[str, str]]] = [
    # (tag, user properties), by index
    ("TagA", {"a": "1", "s": "apple", "b": "true", "f": "1.5"}),
    ("TagB", {"a": "5", "s": "banana", "b": "false", "f": "2.5"}),
    (None, {"a": "10", "s": "cherry", "f": "10.0"}),
    (None, {"a": "20", "s": "apricot", "b": "true"}),
    (None, {"s": "date"}),
    (None, {"a": "7"}),
    ("TagA", {"a": "-3", "s": "melon", "f": "0.5"}),
    ("TagB", {}),
]

EXPRESSIONS: list[tuple[str, list[int]]] = [
    ("a = 5", [1]),
    ("a <> 5", [0, 2, 3, 5, 6]),
    ("a > 5", [2, 3, 5]),
    ("a >= 5", [1, 2, 3, 5]),
    ("a < 5", [0, 6]),
    ("a <= 5", [0, 1, 6]),
    ("a BETWEEN 5 AND 10", [1, 2, 5]),
    ("a NOT BETWEEN 5 AND 10", [0, 3, 6]),
    ("s IN ('apple', 'date')", [0, 4]),
    ("s NOT IN ('apple', 'date')", [1, 2, 3, 6]),
    ("s IS NULL", [5, 7]),
    ("s IS NOT NULL", [0, 1, 2, 3, 4, 6]),
    ("s CONTAINS 'an'", [1]),
    ("s NOT CONTAINS 'an'", [0, 2, 3, 4, 6]),
    ("s STARTSWITH 'ap'", [0, 3]),
    ("s NOT STARTSWITH 'ap'", [1, 2, 4, 6]),
    ("s ENDSWITH 'y'", [2]),
    ("s NOT ENDSWITH 'y'", [0, 1, 3, 4, 6]),
    ("b = TRUE", [0, 3]),
    ("b = FALSE", [1]),
    ("f > 2.0", [1, 2]),
    ("f <= 1.5", [0, 6]),
    ("a > 1 AND s STARTSWITH 'a'", [3]),
    ("a = 1 OR s = 'date'", [0, 4]),
    ("NOT (a > 5)", [0, 1, 6]),
    ("TAGS = 'TagA'", [0, 6]),
    ("(a < 0 OR a > 15) AND s IS NOT NULL", [3, 6]),
    ("nothere = 'x'", []),
]

BAD_EXPRESSION = "a > 1 AND\n  b <"
"""Refused: the expression ends where a value is expected (line 2, column 6)."""
