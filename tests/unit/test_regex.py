"""RE2 patterns as Kafka's RE2/J judges them: an invalid one is refused with RE2/J 1.8's own
description (what Kafka 4.3 puts after "is not a valid regular expression:")."""

from __future__ import annotations

import pytest

from rivulet.common.regex import InvalidRegex, compile_re2

pytestmark = pytest.mark.fast


# Each description is what com.google.re2j.PatternSyntaxException.getDescription() gave for
# the pattern with re2j 1.8 (the version Kafka 4.3.1 ships).
@pytest.mark.parametrize("pattern,description", [
    ("ce-(unclosed", "missing closing )"),
    ("((a)", "missing closing )"),
    ("a)", "regexp/syntax: internal error"),
    ("[a", "missing closing ]"),
    ("[^]", "missing closing ]"),
    ("a**", "invalid nested repetition operator"),
    ("a{2}{3}", "invalid nested repetition operator"),
    ("\\", "trailing backslash at end of expression"),
    ("x{2,1}", "invalid repeat count"),
    ("a{1001}", "invalid repeat count"),
    ("\\8", "invalid escape sequence"),
    ("[a-\\d]", "invalid escape sequence"),
    ("[z-a]", "invalid character class range"),
    ("\\p{Foo}", "invalid character class range"),
    ("*a", "missing argument to repetition operator"),
    ("a|*", "missing argument to repetition operator"),
    ("(?i", "invalid or unsupported Perl syntax"),
    ("(?P=n)", "invalid or unsupported Perl syntax"),
    ("(?P<n", "invalid named capture"),
    ("(?<=a)", "invalid named capture"),
    ("(?<!a)", "invalid named capture"),
    # RE2 accepts these; RE2/J does not.
    ("a\\C", "invalid escape sequence"),
    ("(?P<n>a)\\C", "invalid escape sequence"),
    ("(?<a>x)(?<a>y)", "duplicate capture group name"),
    ("(?P<n>a)|(?P<n>b)", "duplicate capture group name"),
])
def test_an_invalid_pattern_is_described_as_re2j_describes_it(pattern, description):
    with pytest.raises(InvalidRegex) as e:
        compile_re2(pattern)
    assert str(e.value) == description


# Valid for RE2/J 1.8 too: escapes, \\Q...\\E and classes are not mistaken for groups or \\C.
@pytest.mark.parametrize("pattern", ["\\\\C", "[[:alpha:]](?P<n>a)(?P<m>b)", "\\Q(?P<n>\\E(?P<n>a)", "[]a](?P<n>x)",
                                     "(?<n>a)", "\\Qa.b\\E", "\\(?P<n>a\\)"])
def test_patterns_re2j_accepts_compile(pattern):
    compile_re2(pattern)


def test_a_valid_pattern_matches_whole_names():
    p = compile_re2("orders-.*")
    assert p.fullmatch("orders-eu") and not p.fullmatch("x-orders-eu")
