"""HTML for Jupyter: engines and reports render as small tables.

Every function returns a self-contained HTML string (no scripts, no external
styles), so it also reads fine in exported notebooks and on GitHub."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from .engine import Engine

_STYLE = (
    "border-collapse:collapse;font-family:monospace;font-size:12px;margin:2px 0 8px 0;"
)
_CELL = "border:1px solid #ccc;padding:2px 8px;text-align:left;"
_HEAD = _CELL + "background:#f2f2f2;font-weight:bold;"


def _esc(v: Any) -> str:
    return html.escape(str(v))


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[Any]], title: str | None = None) -> str:
    """A plain HTML table (no header row when ``headers`` is None); cells are escaped as text."""
    out = []
    if title:
        out.append(f"<div style='font-weight:bold;margin-top:4px'>{_esc(title)}</div>")
    out.append(f"<table style='{_STYLE}'>")
    if headers:
        out.append("<thead><tr>" + "".join(f"<th style='{_HEAD}'>{_esc(h)}</th>" for h in headers) + "</tr></thead>")
    out.append("<tbody>")
    for r in rows:
        out.append("<tr>" + "".join(f"<td style='{_CELL}'>{_esc(c)}</td>" for c in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def key_values(pairs: Iterable[tuple[str, Any]], title: str | None = None) -> str:
    """A two-column table of (field, value)."""
    return table(None, pairs, title)


def _shape(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def engine_html(engine: "Engine", title: str | None = None, max_ops: int = 12) -> str:
    """An Engine as HTML: device, precision, threads, inputs, outputs and its most common ops."""
    parts = [
        key_values(
            [("device", engine.device), ("precision", engine.precision), ("threads", engine.num_threads)],
            title or "twinfer.Engine",
        ),
        table(["input", "dtype", "shape"], [(s.name, s.dtype, _shape(s.shape)) for s in engine.inputs]),
        table(["output", "dtype", "shape"], [(s.name, s.dtype, _shape(s.shape)) for s in engine.outputs]),
    ]
    try:
        hist = engine.op_histogram()
    except Exception:  # a report must never break the display of the engine itself
        hist = {}
    if hist:
        top = sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))
        rows = top[:max_ops]
        if len(top) > max_ops:
            rows.append((f"... {len(top) - max_ops} more op types", sum(c for _, c in top[max_ops:])))
        parts.append(table(["op (after optimisation)", "count"], rows))
    return "<div>" + "".join(parts) + "</div>"
