"""Render stage: one module per output format, all reading the same :class:`Report`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crashlens.render import ci, html, json_format, markdown, slack, text

if TYPE_CHECKING:
    from crashlens.report import Report

Renderer = Callable[..., str]

FORMATS: dict[str, Renderer] = {
    "text": text.render,
    "json": json_format.render,
    "html": html.render,
    "markdown": markdown.render,
    "slack": slack.render,
    "github": ci.render_github,
    "junit": ci.render_junit,
}


def render(report: Report, fmt: str, **options: Any) -> str:
    """Render ``report`` as ``fmt``.

    Raises:
        ValueError: for an unknown format.
    """
    try:
        renderer = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})") from None
    return renderer(report, **options)
