"""Remediation text: a rule's Markdown template filled from the evidence and the job's facts.

The rank stage calls :func:`remediation` for each cause; ``rules lint`` and ``rules test`` use
:func:`fill` and the splitters to check templates. What a value from the logs may become is
decided here once: plain text, or a code span when it could be read as markup
(:func:`md_value`); rendering the filled Markdown per format is ``render/remedy.py``'s.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable

from crashlens import facts as facts_mod
from crashlens import lazyre
from crashlens.model import Frame, Match

_PLACEHOLDER = lazyre.compile(r"\{(\w+)\}")
_ASIDE = lazyre.compile(r" ?\(([^()]*)\)")


def remediation(m: Match, environment: dict[str, str], frame: Frame | None = None) -> str:
    """The rule's remediation with ``{field}`` placeholders filled from the evidence and facts
    (``{user_frame}``: ``frame``, the innermost frame of the user's code)."""
    values = dict(m.fields)
    values.update(_derived(values))
    if m.ranks:
        values.setdefault("rank", str(m.ranks[0]))
    if m.hosts:
        values.setdefault("host", m.hosts[0])
    if frame is not None:
        values.setdefault("user_frame", str(frame))
    for key, value in facts_mod.placeholder_values(environment).items():
        values.setdefault(key, value)
    return fill(m.rule.remediation, values)


def _derived(values: dict[str, str]) -> dict[str, str]:
    """Values computed from the evidence's: a logged timeout in words (``{timeout}``: "30
    minutes" from ``timeout_ms`` 1800000) and twice it (``{double_timeout}``,
    ``{double_timeout_min}``), so advice about a timeout starts from the one the job had."""
    out: dict[str, str] = {}
    raw = values.get("timeout_ms", "")
    if raw.isdigit() and int(raw) > 0:
        ms = int(raw)
        out["timeout"] = _duration(ms)
        out["double_timeout"] = _duration(2 * ms)
        out["double_timeout_min"] = str(max(1, math.ceil(2 * ms / 60000)))
    return out


def _duration(ms: int) -> str:
    if ms % 3_600_000 == 0:
        n, unit = ms // 3_600_000, "hour"
    elif ms % 60_000 == 0:
        n, unit = ms // 60_000, "minute"
    elif ms % 1000 == 0:
        n, unit = ms // 1000, "second"
    else:
        return f"{ms} ms"
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def fill(template: str, values: dict[str, str]) -> str:
    """Fill ``{field}`` placeholders from the evidence and environment facts.

    The template is Markdown: paragraphs and list items, wrapped in the YAML. Each is reflowed
    to one line (a line break inside a sentence is not the reader's). What needs a value that
    is not known is left out, never shown as "(unknown)": a parenthesised aside ("(from
    {per_device_train_batch_size} to {half_batch})"), else the clause it sits in (between
    commas, semicolons and a label's colon); an item left with nothing is dropped. Malformed
    templates are returned as written.

    The values come from the logs, so they are data, never markup: one that Markdown (or
    Slack, or GitHub) could read as markup becomes a code span (:func:`md_value`), and one
    inside the template's own code span keeps that span closed around it.
    """

    def aside(m: re.Match[str]) -> str:
        names = _PLACEHOLDER.findall(m.group(1))
        return "" if any(n not in values for n in names) else m.group(0)

    def known(text: str) -> bool:
        return all(n in values for n in _PLACEHOLDER.findall(text))

    blocks = []
    # An aside that goes leaves no space before the punctuation that followed it.
    shown = _SPACE_BEFORE_STOP.sub("", _ASIDE.sub(aside, template))
    for block in _blocks(shown):
        if not known(block):
            block = _drop_clauses(block, known)
        if block:
            blocks.append(block)
    try:
        return "\n".join(_substitute(block, values) for block in blocks)
    except (ValueError, KeyError):
        return template


#: A CommonMark code span: a run of backticks, its content, a run of the same length.
_CODE_SPAN = lazyre.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
#: What makes a value markup somewhere: Markdown/HTML punctuation, entities, links and
#: autolinks, mentions, math, emoji codes; or a block marker at its start.
_MARKUP = lazyre.compile(r"[\\`*_\[\]<>&~|@$]|://|www\.|:[\w+-]+:")
_BLOCK_START = lazyre.compile(r"\s*(?:[#>+=-]+|\d{1,9}[.)])(?:\s|$)")
_BACKTICK_RUN = lazyre.compile(r"`+")


def md_value(value: str) -> str:
    """A value from the logs for Markdown prose: as is when it cannot be read as markup, else
    a code span (whose content Markdown, Slack and GitHub all show literally)."""
    text = value.replace("\r", " ").replace("\n", " ")
    if _MARKUP.search(text) or _BLOCK_START.match(text):
        return code_span(text)
    return text


def code_span(text: str) -> str:
    """``text`` as a Markdown code span, delimited by more backticks than it contains."""
    text = text.replace("\r", " ").replace("\n", " ")
    longest = max((len(m) for m in _BACKTICK_RUN.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or text.strip() == "" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _substitute(block: str, values: dict[str, str]) -> str:
    """One block with its placeholders filled: values in prose via :func:`md_value`, values
    inside a code span raw, the span's backticks widened if a value holds backticks."""
    out: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(block):
        out.append(_format(block[pos : m.start()], values, md_value))
        inner = _format(m.group(2), values, lambda v: v.replace("\n", " "))
        if inner == m.group(2).replace("{{", "{").replace("}}", "}") and "`" not in inner:
            out.append(f"{m.group(1)}{inner}{m.group(1)}")
        else:
            out.append(code_span(inner))
        pos = m.end()
    out.append(_format(block[pos:], values, md_value))
    return "".join(out)


def _format(text: str, values: dict[str, str], convert: Callable[[str], str]) -> str:
    """``str.format`` over ``text`` with each value converted; a field that is not a plain
    known name (a format spec, a conversion, an index) raises ``KeyError``."""
    out: list[str] = []
    for literal, name, spec, conversion in string.Formatter().parse(text):
        out.append(literal)
        if name is None:
            continue
        if spec or conversion or name not in values:
            raise KeyError(name)
        out.append(convert(values[name]))
    return "".join(out)


_ITEM = lazyre.compile(r"(?:\d+\.|[-*]) ")
#: Spaces an aside left before a comma or a full stop when it was dropped.
_SPACE_BEFORE_STOP = lazyre.compile(r"(?:[ \t]*\n[ \t]*|[ \t]+)(?=[,.;:](?:\s|$))")
#: Words that join a clause to the one before it: left first when that one is dropped.
_JOINERS = ("or ", "and ", "but ", "then ", "so ", "else ")


def _clauses(text: str) -> list[str]:
    """``text`` split after ``,`` ``;`` and ``:`` at its top level: never inside parentheses,
    brackets or a code span, so an aside ("(hung, slow, or dead)") stays whole."""
    return _split_top(text, ",;:")


def _split_top(text: str, stops: str) -> list[str]:
    """``text`` split after each character of ``stops`` that a space follows, at the top level
    only (not inside parentheses, brackets or a code span); the space is dropped."""
    parts: list[str] = []
    depth, code, start = 0, False, 0
    for i, ch in enumerate(text):
        if ch == "`":
            code = not code
        elif code:
            continue
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch in stops and depth == 0 and text[i + 1 : i + 2] == " ":
            parts.append(text[start : i + 1])
            start = i + 2
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _blocks(template: str) -> list[str]:
    """Paragraphs and list items of a Markdown template, each on one line (blank: ``""``)."""
    blocks: list[str] = []
    open_block = False
    for line in template.splitlines():
        text = line.strip()
        if not text:
            if blocks and blocks[-1]:
                blocks.append("")
            open_block = False
        elif open_block and not _ITEM.match(text):
            blocks[-1] += " " + text
        else:
            blocks.append(text)
            open_block = True
    while blocks and not blocks[-1]:
        blocks.pop()
    return blocks


def _drop_clauses(block: str, known: Callable[[str], bool]) -> str:
    """``block`` without the clauses that need an unknown value ("" if nothing is left), each
    sentence still one: what is left of it starts with a capital, not with the "or" that
    joined it to a dropped clause; a sentence left with nothing goes."""
    marker = _ITEM.match(block)
    head = marker.group(0) if marker else ""
    out: list[str] = []
    for sentence in _sentences(block[len(head) :]):
        if known(sentence):
            out.append(sentence)
            continue
        kept = [c for c in _clauses(sentence) if known(c)]
        text = " ".join(kept).rstrip(",;: ")
        if not text or text.endswith(":") or not any(ch.isalnum() for ch in text):
            continue
        if sentence.rstrip().endswith(".") and not text.endswith("."):
            text += "."
        out.append(_sentence(text))
    return head + " ".join(out) if out else ""


def _sentences(text: str) -> list[str]:
    """``text`` split after each ``. `` at its top level (not in a code span or an aside)."""
    return _split_top(text, ".")


def _sentence(text: str) -> str:
    """``text`` begun as a sentence: a leading joiner dropped, the first letter a capital."""
    for joiner in _JOINERS:
        if text.lower().startswith(joiner):
            text = text[len(joiner) :]
            break
    if text[:1].islower():
        text = text[0].upper() + text[1:]
    return text
