"""Twenty small, real Python bug-fix tasks: a buggy module, visible tests, hidden tests, the fix.

Contains :class:`CodeTask` and :data:`TASKS`. Hidden tests hold both the tests the bug
breaks (fail-to-pass) and tests of behaviour that must keep working (pass-to-pass), as in
SWE-bench. ``fix`` lists the line edits ``(start, end, new text)`` (1-based, inclusive)
that repair the module; the reference solver applies them through the env's tools.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CodeTask:
    """One bug-fix task.

    ``judge`` says how the hidden tests are read: ``suite`` (``test_`` functions of asserts,
    split into probes and checks by :func:`envharness.envs.code_repair.compile_suite`) or
    ``check`` (a benchmark's trusted ``check(candidate)`` program, judged by
    :mod:`envharness.envs.check_judge` with ``entry_point``, the benchmark's ``trusted`` code,
    the test's random ``seed`` and the reference run's ``calls``). ``problem`` is the public
    problem a level was made from (HumanEval's task id), empty for the tasks written here.
    """

    name: str
    module: str
    description: str
    source: str
    fix: tuple[tuple[int, int, str], ...]
    visible_tests: str
    hidden_tests: str
    judge: str = "suite"
    entry_point: str = ""
    trusted: str = ""
    seed: int = 0
    calls: str = "[]"
    problem: str = ""

    @property
    def path(self) -> str:
        return f"{self.module}.py"


def _task(name, module, description, source, fix, visible, hidden) -> CodeTask:
    return CodeTask(name, module, description, source.strip("\n") + "\n", tuple(fix), visible.strip("\n") + "\n", hidden.strip("\n") + "\n")


TASKS: tuple[CodeTask, ...] = (
    _task(
        "add",
        "calc",
        "add(a, b) should return the sum of a and b.",
        """
def add(a, b):
    return a - b
""",
        [(2, 2, "    return a + b")],
        """
from calc import add

def test_add_small():
    assert add(2, 3) == 5
""",
        """
from calc import add

def test_add_negative():
    assert add(-2, -3) == -5

def test_add_zero():
    assert add(0, 7) == 7
""",
    ),
    _task(
        "mean",
        "stats",
        "mean(xs) should return the arithmetic mean of a non-empty list.",
        """
def mean(xs):
    total = 0
    for x in xs:
        total += x
    return total / (len(xs) - 1)
""",
        [(5, 5, "    return total / len(xs)")],
        """
from stats import mean

def test_mean_pair():
    assert mean([2, 4]) == 3
""",
        """
from stats import mean

def test_mean_single():
    assert mean([5]) == 5

def test_mean_many():
    assert mean([1, 2, 3, 4]) == 2.5
""",
    ),
    _task(
        "max_index",
        "seq",
        "argmax(xs) should return the index of the largest element (first one on ties).",
        """
def argmax(xs):
    best = 0
    for i in range(1, len(xs)):
        if xs[i] >= xs[best]:
            best = i
    return best
""",
        [(4, 4, "        if xs[i] > xs[best]:")],
        """
from seq import argmax

def test_argmax_tie():
    assert argmax([5, 5]) == 0
""",
        """
from seq import argmax

def test_argmax_first_on_ties():
    assert argmax([4, 7, 7, 1]) == 1

def test_argmax_single():
    assert argmax([3]) == 0
""",
    ),
    _task(
        "reverse_words",
        "text",
        "reverse_words(s) should reverse the order of words, keeping single spaces.",
        """
def reverse_words(s):
    words = s.split(" ")
    return " ".join(words)
""",
        [(3, 3, '    return " ".join(reversed(s.split()))')],
        """
from text import reverse_words

def test_two_words():
    assert reverse_words("hello world") == "world hello"
""",
        """
from text import reverse_words

def test_extra_spaces():
    assert reverse_words("  a   b c ") == "c b a"

def test_one_word():
    assert reverse_words("solo") == "solo"
""",
    ),
    _task(
        "is_palindrome",
        "text2",
        "is_palindrome(s) should ignore case and non-letters.",
        """
def is_palindrome(s):
    cleaned = s
    return cleaned == cleaned[::-1]
""",
        [(2, 2, "    cleaned = [c.lower() for c in s if c.isalpha()]")],
        """
from text2 import is_palindrome

def test_mixed_case():
    assert is_palindrome("Abba")
""",
        """
from text2 import is_palindrome

def test_sentence():
    assert is_palindrome("A man, a plan, a canal: Panama")

def test_not_palindrome():
    assert not is_palindrome("hello")
""",
    ),
    _task(
        "fizzbuzz",
        "fizz",
        "fizzbuzz(n) returns 'Fizz', 'Buzz', 'FizzBuzz' or str(n).",
        """
def fizzbuzz(n):
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz"
    if n % 15 == 0:
        return "FizzBuzz"
    return str(n)
""",
        [
            (
                2,
                7,
                """    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz\"""",
            )
        ],
        """
from fizz import fizzbuzz

def test_fifteen():
    assert fizzbuzz(15) == "FizzBuzz"
""",
        """
from fizz import fizzbuzz

def test_thirty():
    assert fizzbuzz(30) == "FizzBuzz"

def test_plain():
    assert [fizzbuzz(i) for i in (3, 5, 7)] == ["Fizz", "Buzz", "7"]
""",
    ),
    _task(
        "clamp",
        "bounds",
        "clamp(x, lo, hi) should limit x to the closed interval [lo, hi].",
        """
def clamp(x, lo, hi):
    if x < lo:
        return hi
    if x > hi:
        return lo
    return x
""",
        [(3, 3, "        return lo"), (5, 5, "        return hi")],
        """
from bounds import clamp

def test_below():
    assert clamp(-5, 0, 10) == 0
""",
        """
from bounds import clamp

def test_above():
    assert clamp(50, 0, 10) == 10

def test_inside():
    assert clamp(5, 0, 10) == 5
""",
    ),
    _task(
        "count_vowels",
        "vowels",
        "count_vowels(s) counts a, e, i, o, u in either case.",
        """
def count_vowels(s):
    return sum(1 for c in s if c in "aeiou")
""",
        [(2, 2, '    return sum(1 for c in s.lower() if c in "aeiou")')],
        """
from vowels import count_vowels

def test_upper():
    assert count_vowels("AEIOU") == 5
""",
        """
from vowels import count_vowels

def test_mixed():
    assert count_vowels("Programming Is Fun") == 5

def test_none():
    assert count_vowels("rhythm") == 0
""",
    ),
    _task(
        "flatten",
        "nested",
        "flatten(xs) flattens arbitrarily nested lists.",
        """
def flatten(xs):
    out = []
    for x in xs:
        if isinstance(x, list):
            out.extend(x)
        else:
            out.append(x)
    return out
""",
        [(5, 5, "            out.extend(flatten(x))")],
        """
from nested import flatten

def test_two_levels():
    assert flatten([1, [2, [3]]]) == [1, 2, 3]
""",
        """
from nested import flatten

def test_deep():
    assert flatten([[[[1]]], 2, [[3, [4]]]]) == [1, 2, 3, 4]

def test_flat():
    assert flatten([1, 2]) == [1, 2]
""",
    ),
    _task(
        "chunks",
        "chunking",
        "chunks(xs, n) splits xs into consecutive lists of n (the last may be shorter).",
        """
def chunks(xs, n):
    return [xs[i:i + n] for i in range(0, len(xs) - n, n)]
""",
        [(2, 2, "    return [xs[i:i + n] for i in range(0, len(xs), n)]")],
        """
from chunking import chunks

def test_uneven():
    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
""",
        """
from chunking import chunks

def test_even():
    assert chunks([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]

def test_empty():
    assert chunks([], 3) == []
""",
    ),
    _task(
        "factorial",
        "fact",
        "factorial(n) for n >= 0, with factorial(0) == 1.",
        """
def factorial(n):
    result = 0
    for k in range(2, n + 1):
        result *= k
    return result
""",
        [(2, 2, "    result = 1")],
        """
from fact import factorial

def test_five():
    assert factorial(5) == 120
""",
        """
from fact import factorial

def test_zero():
    assert factorial(0) == 1

def test_one():
    assert factorial(1) == 1
""",
    ),
    _task(
        "binary_search",
        "search",
        "index_of(xs, x) returns the index of x in sorted xs, or -1.",
        """
def index_of(xs, x):
    lo, hi = 0, len(xs) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] == x:
            return mid
        if xs[mid] < x:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
""",
        [(3, 3, "    while lo <= hi:")],
        """
from search import index_of

def test_last():
    assert index_of([1, 3, 5, 7], 7) == 3
""",
        """
from search import index_of

def test_single():
    assert index_of([4], 4) == 0

def test_missing():
    assert index_of([1, 3, 5], 4) == -1
""",
    ),
    _task(
        "dedupe",
        "uniq",
        "dedupe(xs) removes duplicates and keeps the first occurrence order.",
        """
def dedupe(xs):
    return list(set(xs))
""",
        [(2, 2, "    return list(dict.fromkeys(xs))")],
        """
from uniq import dedupe

def test_order():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]
""",
        """
from uniq import dedupe

def test_strings():
    assert dedupe(["b", "a", "b"]) == ["b", "a"]

def test_order_kept():
    assert dedupe([2, 1, 2]) == [2, 1]

def test_empty():
    assert dedupe([]) == []
""",
    ),
    _task(
        "word_count",
        "words",
        "word_count(s) maps each lowercase word to its count.",
        """
def word_count(s):
    counts = {}
    for word in s.split():
        counts[word] = 1
    return counts
""",
        [(4, 4, "        counts[word.lower()] = counts.get(word.lower(), 0) + 1")],
        """
from words import word_count

def test_repeat():
    assert word_count("a b a") == {"a": 2, "b": 1}
""",
        """
from words import word_count

def test_case():
    assert word_count("The the THE") == {"the": 3}

def test_empty():
    assert word_count("") == {}
""",
    ),
    _task(
        "celsius",
        "temperature",
        "to_fahrenheit(c) converts Celsius to Fahrenheit.",
        """
def to_fahrenheit(c):
    return c * 5 / 9 + 32
""",
        [(2, 2, "    return c * 9 / 5 + 32")],
        """
from temperature import to_fahrenheit

def test_boiling():
    assert to_fahrenheit(100) == 212
""",
        """
from temperature import to_fahrenheit

def test_freezing():
    assert to_fahrenheit(0) == 32

def test_minus_forty():
    assert to_fahrenheit(-40) == -40
""",
    ),
    _task(
        "leap_year",
        "calendar_utils",
        "is_leap(year) follows the Gregorian rules.",
        """
def is_leap(year):
    return year % 4 == 0
""",
        [(2, 2, "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)")],
        """
from calendar_utils import is_leap

def test_century():
    assert not is_leap(1900)
""",
        """
from calendar_utils import is_leap

def test_four_hundred():
    assert is_leap(2000)

def test_ordinary():
    assert is_leap(2024) and not is_leap(2023)

def test_2100():
    assert not is_leap(2100)
""",
    ),
    _task(
        "running_sum",
        "prefix",
        "running_sum(xs) returns the prefix sums of xs.",
        """
def running_sum(xs):
    out, total = [], 0
    for x in xs:
        out.append(total)
        total += x
    return out
""",
        [
            (
                4,
                5,
                """        total += x
        out.append(total)""",
            )
        ],
        """
from prefix import running_sum

def test_small():
    assert running_sum([1, 2, 3]) == [1, 3, 6]
""",
        """
from prefix import running_sum

def test_empty():
    assert running_sum([]) == []

def test_negative():
    assert running_sum([5, -5, 2]) == [5, 0, 2]
""",
    ),
    _task(
        "merge_sorted",
        "merging",
        "merge(a, b) merges two sorted lists into one sorted list.",
        """
def merge(a, b):
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out
""",
        [(11, 11, "    return out + a[i:] + b[j:]")],
        """
from merging import merge

def test_tail():
    assert merge([1, 4], [2, 3, 9]) == [1, 2, 3, 4, 9]
""",
        """
from merging import merge

def test_one_empty():
    assert merge([], [1, 2]) == [1, 2]

def test_interleaved():
    assert merge([1, 3, 5], [2, 4, 6]) == [1, 2, 3, 4, 5, 6]
""",
    ),
    _task(
        "capitalize",
        "titles",
        "title_case(s) capitalizes the first letter of every word.",
        """
def title_case(s):
    return " ".join(w[:1].upper() + w[1:] for w in s.split(" ")[1:])
""",
        [(2, 2, '    return " ".join(w[:1].upper() + w[1:] for w in s.split(" "))')],
        """
from titles import title_case

def test_two_words():
    assert title_case("hello world") == "Hello World"
""",
        """
from titles import title_case

def test_single():
    assert title_case("python") == "Python"

def test_already():
    assert title_case("Big Cat") == "Big Cat"
""",
    ),
    _task(
        "safe_div",
        "division",
        "safe_div(a, b) returns a / b, or None when b is zero.",
        """
def safe_div(a, b):
    if b == 0:
        return 0
    return a / b
""",
        [(3, 3, "        return None")],
        """
from division import safe_div

def test_zero():
    assert safe_div(1, 0) is None
""",
        """
from division import safe_div

def test_zero_numerator():
    assert safe_div(0, 0) is None

def test_normal():
    assert safe_div(9, 3) == 3
""",
    ),
)
