"""Rule remediation, which is Markdown, for each format: HTML, plain text and Slack mrkdwn.

The rank stage fills a remediation's placeholders so that every value taken from the
logs is plain text or a code span (``crashlens.remediation.md_value``): whatever markup the
Markdown holds is the rule author's. It is still parsed strictly here: CommonMark with raw
HTML off (a tag is shown as text), no images, and a link only when its target is an http(s)
URL; any other link is shown as its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.tree import SyntaxTreeNode

from crashlens import lazyre

_HTTP = lazyre.compile(r"https?://[^\s<>\"'`]+\Z", re.IGNORECASE)


def is_http_url(url: str) -> bool:
    """Whether ``url`` is a plain http(s) URL (the only targets a report links to)."""
    return _HTTP.match(url.strip()) is not None


def _link_open(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: Any, env: Any
) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    md.disable(["image", "html_inline", "html_block"])
    md.validateLink = is_http_url  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    return md


_MD = _parser()


def tree(markdown: str) -> SyntaxTreeNode:
    """The parsed remediation (links already limited to http(s))."""
    return SyntaxTreeNode(_MD.parse(markdown))


def to_html(markdown: str) -> str:
    """HTML for the remediation: ``<p>``, ``<ol>``/``<li>``, ``<code>``, http(s) links."""
    return str(_MD.render(markdown))


# --- plain text and Slack ---------------------------------------------------------------------


def to_plain(markdown: str) -> str:
    """Plain text: one line per paragraph and list item (``1. ...``), code in backticks."""
    return "\n".join(_blocks(tree(markdown), _plain_inline, bullet="-")).strip()


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
