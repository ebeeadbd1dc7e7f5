"""Module-level regular expressions, compiled when first used.

Compiling every pattern of every module at import costs a small job more than analysing it
(the ``regex`` module parses patterns in Python; a run uses a few of them). ``compile`` and
``compile_regex`` return a stand-in for the compiled pattern: the first use of any of its
attributes compiles it, and from then on its methods are the compiled pattern's own (no
indirection on a hot path). It pickles as its source, and ``is_compiled`` says whether it has
been used (tests/test_startup.py)::

    _STEP = lazyre.compile(r"step (\\d+)")        # re
    _HOST = lazyre.compile_regex(r"(?<host>\\w+)") # the regex module
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, AnyStr, cast

if TYPE_CHECKING:
    import re

__all__ = ["LazyRegex", "compile", "compile_regex", "is_compiled"]

#: The compiled pattern's methods, bound on first use so that later calls go straight to them.
_METHODS = (
    "match",
    "fullmatch",
    "search",
    "finditer",
    "findall",
    "sub",
    "subn",
    "split",
    "scanner",
)


class LazyRegex:
    """A pattern of ``engine`` (``re`` or ``regex``), compiled on first use."""

    def __init__(self, engine: str, pattern: str | bytes, flags: int = 0) -> None:
        self.__dict__["_source"] = (engine, pattern, flags)

    def _compile(self) -> Any:
        engine, pattern, flags = self.__dict__["_source"]
        compiled = importlib.import_module(engine).compile(pattern, flags)
        for name in _METHODS:
            method = getattr(compiled, name, None)
            if method is not None:
                self.__dict__[name] = method
        self.__dict__["_compiled"] = compiled
        return compiled

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the instance does not hold yet: compile, then look again.
        if name.startswith("__"):
            raise AttributeError(name)
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = self._compile()
        return getattr(compiled, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot set {name!r} on a pattern")

    def __reduce__(self) -> tuple[Any, ...]:
        return LazyRegex, self.__dict__["_source"]

    def __repr__(self) -> str:
        engine, pattern, flags = self.__dict__["_source"]
        return f"{engine}.compile({pattern!r}, {flags})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyRegex):
            return bool(self.__dict__["_source"] == other.__dict__["_source"])
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.__dict__["_source"])


def compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(pattern, flags)``, compiled on first use."""
    return cast("re.Pattern[AnyStr]", LazyRegex("re", pattern, int(flags)))


def compile_regex(pattern: str | bytes, flags: int = 0) -> Any:
    """``regex.compile(pattern, flags)``, compiled on first use."""
    return LazyRegex("regex", pattern, int(flags))


def is_compiled(pattern: object) -> bool:
    """Whether ``pattern`` is compiled (a lazy one that was used, or any other pattern)."""
    if isinstance(pattern, LazyRegex):
        return "_compiled" in pattern.__dict__
    return True
