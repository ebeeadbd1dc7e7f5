"""Rule remediation, which is Markdown, for each format: HTML, plain text and Slack mrkdwn.

The rank stage fills a remediation's placeholders so that every value taken from the
logs is plain text or a code span (``crashlens.remediation.md_value``): whatever markup the
Markdown holds is the rule author's. It is still parsed strictly here: CommonMark with raw
HTML off (a tag is shown as text), no images, and a link only when its target is an http(s)
URL; any other link is shown as its text.

Plain text of the usual remediation (paragraphs, a numbered list, code spans and nothing that
could be other markup) is written without the parser (:func:`simple_plain`, checked against it
by tests/test_startup.py): a terminal-less ``analyze`` never imports markdown-it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from crashlens import lazyre

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML
    from markdown_it.token import Token
    from markdown_it.tree import SyntaxTreeNode

_HTTP = lazyre.compile(r"https?://[^\s<>\"'`]+\Z", re.IGNORECASE)


def is_http_url(url: str) -> bool:
    """Whether ``url`` is a plain http(s) URL (the only targets a report links to)."""
    return _HTTP.match(url.strip()) is not None


def _link_open(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: Any, env: Any
) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


@functools.cache
def _parser() -> MarkdownIt:
    """The parser (built on first use)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False})
    md.disable(["image", "html_inline", "html_block"])
    md.validateLink = is_http_url  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    return md


def tree(markdown: str) -> SyntaxTreeNode:
    """The parsed remediation (links already limited to http(s))."""
    from markdown_it.tree import SyntaxTreeNode

    return SyntaxTreeNode(_parser().parse(markdown))


def to_html(markdown: str) -> str:
    """HTML for the remediation: ``<p>``, ``<ol>``/``<li>``, ``<code>``, http(s) links."""
    return str(_parser().render(markdown))


# --- plain text and Slack ---------------------------------------------------------------------


def to_plain(markdown: str) -> str:
    """Plain text: one line per paragraph and list item (``1. ...``), code in backticks."""
    simple = simple_plain(markdown)
    if simple is not None:
        return simple
    return "\n".join(_blocks(tree(markdown), _plain_inline, bullet="-")).strip()


#: A top-level ordered list item as the simple reader takes it: ``N. text``.
_ITEM_LINE = lazyre.compile(r"(\d{1,9})\. (\S.*)\Z")
#: What may start a block other than a paragraph or such an item (or be a list marker).
_OTHER_BLOCK = lazyre.compile(r"[#>\-+*=_~<]|```|\d{1,9}[.)](?: |\Z)")
#: Whitespace but spaces and newlines (tabs, CR, NBSP: the parser's rules differ for them).
_ODD_SPACE = lazyre.compile(r"[^\S \n]|\x00")
#: Characters that may start inline markup outside code spans (``_`` is checked apart).
_MARKUP = frozenset("\\&<*[]")


def simple_plain(markdown: str) -> str | None:
    """:func:`to_plain` of ``markdown`` without the parser, or None when it may hold anything
    but paragraphs, top-level ``N. `` list items (one paragraph each), single-backtick code
    spans within a line, and text with no markup character (``_`` only inside a word)."""
    if _ODD_SPACE.search(markdown):
        return None
    blocks = _simple_blocks(markdown.split("\n"))
    if blocks is None:
        return None
    out: list[str] = []
    for number, lines in blocks:
        parts = [_simple_inline(line) for line in lines]
        if any(part is None for part in parts):
            return None
        text = " ".join(p for p in parts if p is not None).strip()
        if number is None:
            if out and out[-1]:
                out.append("")
            out.append(text)
        else:
            out.append(f"{number}. {text}")
    return "\n".join(out).strip()


def _simple_blocks(lines: list[str]) -> list[tuple[int | None, list[str]]] | None:
    """The paragraphs (number None) and list items (their number as rendered: the list's
    start plus the item's place) of ``lines``, each as its stripped lines; None for any other
    structure."""
    blocks: list[tuple[int | None, list[str]]] = []
    current: list[str] | None = None  # the open block's lines
    in_paragraph = False
    next_number: int | None = None  # the open list's next item number
    for raw in lines:
        stripped = raw.strip(" ")
        if not stripped:
            current = None
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        item = _ITEM_LINE.match(raw) if indent == 0 else None
        if item is not None:
            if current is not None and in_paragraph and int(item[1]) != 1:
                return None  # not an item: the paragraph's next line
            if _OTHER_BLOCK.match(item[2]):
                return None  # the item holds another block (a quote, a heading, a list)
            if next_number is None:
                next_number = int(item[1])
            current = [item[2].rstrip(" ")]
            blocks.append((next_number, current))
            next_number, in_paragraph = next_number + 1, False
            continue
        if _OTHER_BLOCK.match(stripped):
            return None
        if current is not None:
            current.append(stripped)  # a continuation line, indented or lazy
            continue
        if indent >= 4 or (next_number is not None and indent):
            return None  # code, or an item's second paragraph
        current, in_paragraph, next_number = [stripped], True, None
        blocks.append((None, current))
    return blocks


def _simple_inline(line: str) -> str | None:
    """One line's plain text: code spans kept in backticks (one space trimmed from each side
    when both have one); None for anything that may be other markup."""
    if "``" in line:
        return None
    pieces = line.split("`")
    if len(pieces) % 2 == 0:
        return None  # a backtick left open
    out = []
    for k, piece in enumerate(pieces):
        if k % 2:
            if len(piece) > 1 and piece[0] == piece[-1] == " " and piece.strip(" "):
                piece = piece[1:-1]
            out.append(f"`{piece}`")
            continue
        if not _MARKUP.isdisjoint(piece) or not _underscores_in_words(piece):
            return None
        out.append(piece)
    return "".join(out)


def _underscores_in_words(text: str) -> bool:
    """Whether every ``_`` of ``text`` has an ASCII letter or digit on both sides (so cannot
    open or close emphasis)."""
    at = text.find("_")
    while at >= 0:
        before, after = text[at - 1 : at], text[at + 1 : at + 2]
        if not (before.isascii() and before.isalnum() and after.isascii() and after.isalnum()):
            return False
        at = text.find("_", at + 1)
    return True


def to_mrkdwn(markdown: str, escape: Callable[[str], str]) -> str:
    """Slack mrkdwn: numbered lines, ``•`` bullets, ``code``, ``<url|text>`` for http(s) only.

    ``escape`` makes text inert for Slack (entities for ``&<>``, broadcasts defused).
    """
    return "\n".join(_blocks(tree(markdown), lambda n: _slack_inline(n, escape), bullet="•"))


def _blocks(
    node: SyntaxTreeNode, inline: Callable[[SyntaxTreeNode], str], *, bullet: str, indent: str = ""
) -> list[str]:
    out: list[str] = []
    for child in node.children:
        kind = child.type
        if kind == "paragraph":
            if out and out[-1] and not indent:
                out.append("")
            out.append(indent + "".join(inline(c) for c in child.children).strip())
        elif kind in ("ordered_list", "bullet_list"):
            start = int(str(child.attrs.get("start", 1))) if kind == "ordered_list" else 1
            for i, item in enumerate(child.children):
                marker = f"{start + i}." if kind == "ordered_list" else bullet
                lines = _blocks(item, inline, bullet=bullet, indent=indent + "   ")
                lines = [x for x in lines if x.strip()]
                head = lines[0].lstrip() if lines else ""
                out.append(f"{indent}{marker} {head}")
                out.extend(lines[1:])
        elif kind in ("fence", "code_block"):
            out.extend(indent + "    " + x for x in child.content.rstrip("\n").splitlines())
        elif kind == "heading":
            out.append(indent + "".join(inline(c) for c in child.children).strip())
        elif kind == "blockquote":
            out.extend("> " + x for x in _blocks(child, inline, bullet=bullet, indent=indent))
        elif kind == "hr":
            out.append(indent + "---")
        else:
            out.extend(_blocks(child, inline, bullet=bullet, indent=indent))
    return out


def _plain_inline(node: SyntaxTreeNode) -> str:
    kind = node.type
    if kind == "inline":
        return "".join(_plain_inline(c) for c in node.children)
    if kind == "text":
        return node.content
    if kind == "code_inline":
        return f"`{node.content}`"
    if kind in ("softbreak", "hardbreak"):
        return " "
    if kind == "link":
        text = "".join(_plain_inline(c) for c in node.children)
        href = str(node.attrs.get("href", ""))
        return text if text == href else f"{text} ({href})"
    return "".join(_plain_inline(c) for c in node.children) if node.children else node.content


def _slack_inline(node: SyntaxTreeNode, escape: Callable[[str], str]) -> str:
    kind = node.type

    def inner() -> str:
        return "".join(_slack_inline(c, escape) for c in node.children)

    if kind == "text":
        return escape(node.content)
    if kind == "code_inline":
        # Slack's code spans are single backticks and cannot hold one.
        code = escape(node.content.replace("`", "'"))
        return f"`{code}`"
    if kind in ("softbreak", "hardbreak"):
        return " "
    if kind == "strong":
        return f"*{inner()}*"
    if kind == "em":
        return f"_{inner()}_"
    if kind == "link":
        href = str(node.attrs.get("href", ""))
        text = inner()
        if is_http_url(href) and "|" not in href and ">" not in href:
            return f"<{href}|{text}>"
        return text
    return inner() if node.children else escape(node.content)
