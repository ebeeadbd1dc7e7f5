"""Find literal substrings a regex cannot match without, for the one-pass prefilter.

Running every rule's regex on every line is what makes log scanners slow. Each detector
instead names (or gets derived here) literals that any match must contain; a line is only
handed to the regexes if it contains one of them.
"""

from __future__ import annotations

_SPECIAL = set(".^$*+?{}[]\\|()")
_ESCAPED_LITERAL = set(".^$*+?{}[]\\|()-/ #:'\"=<>,!@%&~`;")


def required_literals(pattern: str, min_len: int = 3) -> tuple[str, ...] | None:
    """Return literals of which every match of ``pattern`` contains at least one.

    Returns None when no such set can be derived (the detector then runs on every line).
    Top-level alternatives each contribute their own longest literal.
    """
    if pattern.startswith("(?"):
        end = pattern.find(")")
        flags = pattern[2:end]
        if end > 0 and flags.isalpha():
            pattern = pattern[end + 1 :]
    branches = _split_top_level(pattern)
    out: list[str] = []
    for branch in branches:
        runs = _literal_runs(branch)
        best = max(runs, key=len, default="")
        if len(best) < min_len:
            return None
        out.append(best)
    return tuple(dict.fromkeys(out))


def _split_top_level(pattern: str) -> list[str]:
    parts, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _literal_runs(branch: str) -> list[str]:
    runs: list[str] = []
    cur: list[str] = []
    i = 0

    def cut() -> None:
        if cur:
            runs.append("".join(cur))
            cur.clear()

    while i < len(branch):
        c = branch[i]
        nxt = branch[i + 1] if i + 1 < len(branch) else ""
        if c == "\\":
            esc = nxt
            i += 2
            if esc in _CODE_ESCAPES or esc.isdigit():
                # \x41, \u00e9, \N{...}, octal and backreferences: a character (or a group)
                # that is not the escape's own letters; skip its payload and end the run.
                cut()
                i = _skip_code(branch, i, esc)
                continue
            if esc in _ESCAPED_LITERAL:
                if branch[i : i + 1] in ("?", "*") or branch[i : i + 2] == "{0":
                    cut()
                    continue
                cur.append(esc)
            else:
                cut()
            continue
        if c in "([":
            cut()
            i = _skip_group(branch, i)
            if branch[i : i + 1] in ("?", "*", "+"):
                i += 1
            elif branch[i : i + 1] == "{" and branch[i + 1 : i + 2].isdigit():
                i = branch.find("}", i) + 1  # a counted repeat of the group: {0,80}
            continue
        if c in "?*" or (c == "{" and nxt.isdigit()):
            if cur:
                cur.pop()
            cut()
            i = branch.find("}", i) + 1 if c == "{" else i + 1
            continue
        if c == "+":
            cut()
            i += 1
            continue
        if c in _SPECIAL:
            cut()
            i += 1
            continue
        if nxt in ("?", "*") or (nxt == "{" and branch[i + 2 : i + 3] == "0"):
            cut()
            i += 1
            continue
        cur.append(c)
        i += 1
    cut()
    return runs


#: Escapes whose payload codes a character: ``\x41``, ``\u00e9``, ``\U0001f600``, ``\N{...}``.
_CODE_ESCAPES = {"x": 2, "u": 4, "U": 8, "N": 0}


def _skip_code(branch: str, i: int, esc: str) -> int:
    """The index after the payload of a coded escape whose letter ended at ``i``."""
    if esc.isdigit():
        while i < len(branch) and branch[i].isdigit():
            i += 1
        return i
    if branch[i : i + 1] == "{":
        end = branch.find("}", i)
        return len(branch) if end < 0 else end + 1
    return i + _CODE_ESCAPES[esc]


def class_end(pattern: str, i: int) -> int:
    """Index just past the character class ``[...]`` that starts at ``pattern[i]``."""
    j = i + 1
    if pattern[j : j + 1] == "^":
        j += 1
    if pattern[j : j + 1] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def _skip_group(branch: str, i: int) -> int:
    if branch[i] == "[":
        return class_end(branch, i)
    depth, j, in_class = 0, i, False
    while j < len(branch):
        c = branch[j]
        if c == "\\":
            j += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j
