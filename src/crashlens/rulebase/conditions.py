"""Conditions on environment facts: version specs (``>=2.0,<2.2``), matrix words, equality.

Versions compare as dotted integers without any dependency: ``2.1.2+cu121`` is ``(2, 1, 2)``
(local suffixes and pre-release tags are ignored) and shorter versions are padded with zeros,
so ``2.1`` == ``2.1.0``. ``==1.13.*`` matches every 1.13 release.
"""

from __future__ import annotations

from collections.abc import Mapping

from crashlens import lazyre
from crashlens.facts import version_tuple
from crashlens.ruletypes import VersionEntry, VersionSpec

#: Words that refer to a row of the version matrix instead of spelling a range out.
MATRIX_WORDS = ("known-problem", "recommended", "outside-recommended")
_CLAUSE = lazyre.compile_regex(
    r"\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<v>\d{1,9}(?:\.\d{1,9}){0,5})(?P<star>\.\*)?\s*"
)


def parse_spec(text: str) -> VersionSpec:
    """Parse a ``when:`` value.

    Raises:
        ValueError: for a clause that is not ``<op><dotted version>`` (with ``.*`` only after
            ``==`` / ``!=``).
    """
    text = text.strip()
    if text in MATRIX_WORDS:
        return VersionSpec(text, matrix=text)
    if not text:
        raise ValueError("empty condition")
    if text[0] not in "<>=!~":
        return VersionSpec(text, equals=text.lower())
    clauses = []
    for part in text.split(","):
        m = _CLAUSE.fullmatch(part)
        if m is None:
            raise ValueError(f"'{part.strip()}' is not <op><version> (e.g. '>=2.0', '==1.13.*')")
        star = bool(m["star"])
        if star and m["op"] not in ("==", "!="):
            raise ValueError(f"'{part.strip()}': '.*' only goes with == or !=")
        clauses.append((m["op"], tuple(int(x) for x in m["v"].split(".")), star))
    return VersionSpec(text, clauses=tuple(clauses))


def _pad(a: tuple[int, ...], n: int) -> tuple[int, ...]:
    return a + (0,) * (n - len(a))


def _clause_holds(op: str, have: tuple[int, ...], want: tuple[int, ...], star: bool) -> bool:
    if star:
        prefix = _pad(have, len(want))[: len(want)] == want
        return prefix if op == "==" else not prefix
    n = max(len(have), len(want))
    a, b = _pad(have, n), _pad(want, n)
    if op == ">=":
        return a >= b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == "<":
        return a < b
    if op == "==":
        return a == b
    return a != b


def satisfies(
    value: str, spec: VersionSpec, key: str, matrix: Mapping[str, VersionEntry] | None = None
) -> bool:
    """Whether one fact value meets ``spec`` (a matrix word needs the matrix row of ``key``)."""
    if spec.equals is not None:
        return value.strip().lower() == spec.equals
    if spec.matrix is not None:
        entry = (matrix or {}).get(key)
        if entry is None:
            return False
        if spec.matrix == "known-problem":
            rng = entry.known_problem
            return rng is not None and satisfies(value, rng, key)
        rng = entry.recommended
        if rng is None:
            return False
        inside = satisfies(value, rng, key)
        return inside if spec.matrix == "recommended" else (not inside and _parses(value))
    have = version_tuple(value)
    if have is None:
        return False
    return all(_clause_holds(op, have, want, star) for op, want, star in spec.clauses)


def _parses(value: str) -> bool:
    return version_tuple(value) is not None


def when_holds(
    when: tuple[tuple[str, VersionSpec], ...],
    values: Mapping[str, list[str]],
    matrix: Mapping[str, VersionEntry] | None = None,
) -> bool:
    """Every condition holds for at least one stated value of its fact (absent facts fail)."""
    for key, spec in when:
        stated = values.get(key) or []
        if not any(satisfies(v, spec, key, matrix) for v in stated):
            return False
    return True
