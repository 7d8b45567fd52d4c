"""A report as plain blocks, and its two renderings: one HTML page and one Markdown file.

Both renderings walk the same :class:`Document`, so they state the same facts. Every piece
of text that came from a sweep (parameter values, error lines, names) is escaped here, for
HTML and for Markdown, after its control characters are made visible
(:func:`hpsearch.store.summary.printable`).
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from typing import Union

from hpsearch.store.summary import printable

__all__ = ["C", "Code", "Document", "Figure", "Para", "Section", "Table", "to_html",
           "to_markdown"]


@dataclass(frozen=True)
class C:
    """An inline code span inside a paragraph."""

    text: str


Run = Union[str, C]


@dataclass
class Para:
    """A paragraph: plain text and code spans."""

    runs: list[Run]

    def __init__(self, *runs: Run):
        self.runs = list(runs)


@dataclass
class Code:
    """A block of code (a command line to copy)."""

    text: str


@dataclass
class Table:
    """A table of text cells; ``numeric`` columns are right-aligned."""

    columns: list[str]
    rows: list[list[str]]
    numeric: set[int] = field(default_factory=set)
    wrap: set[int] = field(default_factory=set)  # long-text columns; others stay on one line


@dataclass
class Figure:
    """A PNG image: embedded in the HTML, a file next to the Markdown."""

    name: str
    png: bytes
    alt: str


Block = Union[Para, Code, Table, Figure]


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    """The report: a title, a key-value summary on top, notes, then sections."""

    title: str
    summary: list[tuple[str, list[Run]]]
    sections: list[Section]
    notes: list[str] = field(default_factory=list)
    footer: str = ""

    def figures(self) -> list[Figure]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Figure)]


# --- HTML ------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
       margin: 0; color: #1d2430; background: #fff; line-height: 1.45; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 1.6em; margin: 0 0 12px; }
h2 { font-size: 1.25em; margin: 34px 0 10px; padding-bottom: 4px;
     border-bottom: 1px solid #d8dde6; }
p { margin: 8px 0; max-width: 80em; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.9em; }
code { background: #f1f3f7; padding: 1px 4px; border-radius: 3px; }
pre { background: #f1f3f7; padding: 10px 12px; border-radius: 4px; overflow-x: auto;
      white-space: pre-wrap; word-break: break-all; }
table { border-collapse: collapse; margin: 10px 0; font-size: 0.92em; }
th, td { border: 1px solid #d8dde6; padding: 4px 9px; text-align: left; vertical-align: top;
         white-space: nowrap; }
th { background: #f1f3f7; font-weight: 600; white-space: normal; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.wrap, table.summary td { white-space: normal; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
tbody tr:nth-child(even) { background: #fafbfc; }
table.summary { font-size: 1em; }
table.summary th { width: 11em; background: #f6f7f9; }
.notes { background: #fff6e0; border: 1px solid #f0d48a; padding: 8px 14px;
         border-radius: 4px; }
nav { font-size: 0.92em; margin: 14px 0 0; }
nav a { margin-right: 10px; white-space: nowrap; color: #2457a6; text-decoration: none; }
img { max-width: 100%; height: auto; display: block; margin: 10px 0; }
footer { margin-top: 40px; font-size: 0.85em; color: #5b6475; }
"""


def _h(text: str) -> str:
    return html.escape(printable(text), quote=True)


def _runs_html(runs: list[Run]) -> str:
    return "".join(f"<code>{_h(r.text)}</code>" if isinstance(r, C) else _h(r) for r in runs)


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{_h(c)}</th>" for c in table.columns)
    thead = f"<thead><tr>{head}</tr></thead>" if any(table.columns) else ""
    body = []
    for row in table.rows:
        cells = []
        for i, v in enumerate(row):
            cls = "num" if i in table.numeric else "wrap" if i in table.wrap else ""
            cells.append(f'<td class="{cls}">{_h(v)}</td>' if cls else f"<td>{_h(v)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table>{thead}<tbody>{"".join(body)}</tbody></table></div>'


def _block_html(block: Block) -> str:
    if isinstance(block, Para):
        return f"<p>{_runs_html(block.runs)}</p>"
    if isinstance(block, Code):
        return f"<pre>{_h(block.text)}</pre>"
    if isinstance(block, Table):
        return _table_html(block)
    data = base64.b64encode(block.png).decode("ascii")
    return f'<img alt="{_h(block.alt)}" src="data:image/png;base64,{data}">'


def to_html(doc: Document) -> str:
    """One self-contained page: inline CSS, images as base64 PNG, no script, no link out."""
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_h(doc.title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
           "<main>", f"<h1>{_h(doc.title)}</h1>"]
    rows = "".join(f"<tr><th>{_h(k)}</th><td>{_runs_html(v)}</td></tr>" for k, v in doc.summary)
    out.append(f'<table class="summary"><tbody>{rows}</tbody></table>')
    if doc.notes:
        items = "".join(f"<li>{_h(n)}</li>" for n in doc.notes)
        out.append(f'<div class="notes"><ul>{items}</ul></div>')
    links = " ".join(f'<a href="#{_h(s.id)}">{_h(s.title)}</a>' for s in doc.sections)
    out.append(f"<nav>{links}</nav>")
    for section in doc.sections:
        out.append(f'<section id="{_h(section.id)}"><h2>{_h(section.title)}</h2>')
        out.extend(_block_html(b) for b in section.blocks)
        out.append("</section>")
    if doc.footer:
        out.append(f"<footer>{_h(doc.footer)}</footer>")
    out += ["</main>", "</body>", "</html>", ""]
    return "\n".join(out)


# --- Markdown --------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


def _m(text: str) -> str:
    """Plain text for Markdown: visible control characters, one line, specials escaped."""
    return _MD_SPECIAL.sub(r"\\\1", re.sub(r"\s+", " ", printable(text)))


def _code_span(text: str) -> str:
    text = re.sub(r"\s+", " ", printable(text)).strip()
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _runs_md(runs: list[Run]) -> str:
    return "".join(_code_span(r.text) if isinstance(r, C) else _m(r) for r in runs)


def _table_md(table: Table) -> list[str]:
    head = "| " + " | ".join(_m(c) for c in table.columns) + " |"
    rule = "| " + " | ".join("---:" if i in table.numeric else "---"
                             for i in range(len(table.columns))) + " |"
    rows = ["| " + " | ".join(_m(v) for v in row) + " |" for row in table.rows]
    return [head, rule, *rows]


def to_markdown(doc: Document, *, images: str | None) -> str:
    """The report in Markdown. ``images`` is the folder (relative to the file) that holds
    the figures as ``<name>.png``; ``None`` leaves them out with a note."""
    out = [f"# {_m(doc.title)}", "", "| | |", "| --- | --- |"]
    out += [f"| **{_m(k)}** | {_runs_md(v)} |" for k, v in doc.summary]
    out.append("")
    if doc.notes:
        out += [f"> **Note:** {_m(n)}" + "  " for n in doc.notes] + [""]
    for section in doc.sections:
        out += [f"## {_m(section.title)}", ""]
        for block in section.blocks:
            if isinstance(block, Para):
                out += [_runs_md(block.runs), ""]
            elif isinstance(block, Code):
                text = printable(block.text)
                fence = "~~~" if "```" in text else "```"
                out += [f"{fence}sh", text, fence, ""]
            elif isinstance(block, Table):
                out += _table_md(block) + [""]
            elif images is None:
                out += [f"*Figure omitted: {_m(block.alt)} (see report.html).*", ""]
            else:
                out += [f"![{_m(block.alt)}]({images}/{block.name}.png)", ""]
    if doc.footer:
        out += ["---", "", _m(doc.footer), ""]
    return "\n".join(out)
