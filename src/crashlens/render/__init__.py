"""Render stage: one module per output format, all reading the same :class:`Report`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crashlens.report import Report

Renderer = Callable[..., str]

#: Each format's renderer, as ``module:function`` under crashlens.render.
_RENDERERS = {
    "text": "text:render",
    "json": "json_format:render",
    "html": "html:render",
    "markdown": "markdown:render",
    "slack": "slack:render",
    "github": "ci:render_github",
    "junit": "ci:render_junit",
}


class _Renderers(Mapping[str, Renderer]):
    """Format name -> renderer; a renderer's module is imported when its format is asked
    for (a run that prints text never loads the HTML and Slack renderers)."""

    def __getitem__(self, fmt: str) -> Renderer:
        module, _, name = _RENDERERS[fmt].partition(":")
        renderer: Renderer = getattr(importlib.import_module(f"crashlens.render.{module}"), name)
        return renderer

    def __contains__(self, fmt: object) -> bool:
        return fmt in _RENDERERS  # without importing the renderer

    def __iter__(self) -> Iterator[str]:
        return iter(_RENDERERS)

    def __len__(self) -> int:
        return len(_RENDERERS)


FORMATS: Mapping[str, Renderer] = _Renderers()


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
