"""A small document model (sections of text, tables and images) and its two writers.

Markdown: GitHub-flavoured tables ready to paste into a README; images are written as PNG
files next to the report and linked. HTML: one self-contained file, inline CSS, every image a
base64 ``data:`` URI, no scripts and no external resources, readable offline. Text in
`backticks` (a command, an option) becomes ``<code>`` in HTML, never a literal backtick; each
figure carries what it shows (axis ranges, labels, where its text landed) in a ``data-plot``
attribute, as JSON, for checks from outside the page.

Text in the blocks is plain text, whoever wrote it: a run name like ``<script>...``, ``a|b``
or ``![x](http://...)`` comes out as those characters in both writers, never as HTML, a
broken table or a link (``md_safe``; the HTML writer escapes everything).
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaleprobe.core.fmt import md_table


@dataclass
class Text:
    text: str  # lines starting with "- " form a list
    note: bool = False  # small print under a table


@dataclass
class Sub:
    title: str  # a sub-heading inside a section


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Any]]
    right: list[bool] | None = None  # right-aligned columns; default all but the first
    caption: str = ""
    # HTML: a column's least width (a CSS length, e.g. "24em"), so a short cell stays one line
    min_width: dict[int, str] = field(default_factory=dict)


@dataclass
class Long:
    """A table cell whose text can run long (a finding's evidence, 900 characters for eight
    runs): Markdown shows its beginning, cut after a clause, and says where the rest is;
    HTML shows the same beginning with the whole text one click away (``<details>``)."""

    text: str
    limit: int = 320

    def head(self) -> str | None:
        """The beginning shown, or None when the text is short enough to show whole."""
        if len(self.text) <= self.limit:
            return None
        cut = self.text[:self.limit]
        at = max(cut.rfind("; "), cut.rfind(". "))
        if at < self.limit // 2:
            at = cut.rfind(" ")
        return cut[:at + 1 if at > 0 else self.limit].rstrip(" ;,")

    def __str__(self) -> str:
        head = self.head()
        return self.text if head is None else f"{head} ... (the whole text: report.html)"


@dataclass
class Image:
    name: str  # file stem, unique in the report
    png: bytes
    alt: str
    meta: dict[str, Any] | None = None  # plots.Plot.meta: what the figure shows


@dataclass
class Section:
    title: str
    blocks: list[Any] = field(default_factory=list)
    anchor: str = ""
    lead: bool = False  # the report's answer: set apart at the top of the HTML

    def add(self, *blocks: Any) -> Section:
        self.blocks.extend(b for b in blocks if b is not None)
        return self


_HTML_OPEN = re.compile(r"<(?=[A-Za-z/!?])")  # what can start a tag, comment or autolink


def md_safe(text: Any) -> str:
    """Plain text for Markdown: nothing in it can open raw HTML (``<script>``, ``<img ...>``,
    ``<!--``) or a link or image (``[x](y)``, ``![x](y)``). Code spans and emphasis that the
    report's own texts use are left as they are; ``|`` and line breaks in table cells are
    handled by ``md_table``."""
    return _HTML_OPEN.sub("&lt;", str(text)).replace("](", "]\\(")


def _md_text(t: Text) -> str:
    """Each plain line its own paragraph, runs of '- ' lines one list (a paragraph right
    after a list item would otherwise continue the item)."""
    if t.note:
        return "\n".join(f"<sub>{md_safe(line)}</sub>  " for line in t.text.splitlines())
    out: list[str] = []
    prev_item = False
    for line in map(md_safe, t.text.splitlines()):
        item = line.startswith("- ")
        if out and not (item and prev_item):
            out.append("")
        out.append(line)
        prev_item = item
    return "\n".join(out)


def to_markdown(title: str, intro: list[Any], sections: list[Section], out_dir: Path,
                image_dir: str = "report_files") -> str:
    """Render; images go to ``out_dir/image_dir/<name>.png`` and are linked relatively."""
    parts = [f"# {md_safe(title)}", ""]
    used: set[str] = set()
    lead = [s for s in sections if s.lead]
    for s in lead + [Section("", list(intro))] + [s for s in sections if not s.lead]:
        if s.title:
            parts += [f"## {md_safe(s.title)}", ""]
        for block in s.blocks:
            parts += [_md_block(block, out_dir, image_dir, used), ""]
    return "\n".join(parts).rstrip() + "\n"


def _md_block(block: Any, out_dir: Path, image_dir: str, used: set[str]) -> str:
    if isinstance(block, Sub):
        return f"### {md_safe(block.title)}"
    if isinstance(block, Text):
        return _md_text(block)
    if isinstance(block, Table):
        cap = f"**{md_safe(block.caption)}**\n\n" if block.caption else ""
        return cap + md_table([md_safe(h) for h in block.headers],
                              [[md_safe(c) for c in row] for row in block.rows], block.right)
    if isinstance(block, Image):
        stem, n = block.name, 1
        while stem in used:  # two figures with one name: number the later ones
            n += 1
            stem = f"{block.name}-{n}"
        used.add(stem)
        folder = out_dir / image_dir
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.png").write_bytes(block.png)
        alt = md_safe(block.alt).replace("[", "\\[").replace("]", "\\]")
        return f"![{alt}]({image_dir}/{stem}.png)"
    raise TypeError(f"unknown block {type(block).__name__}")


CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1d2330;
margin:0 auto;max-width:1200px;padding:16px 28px 48px;background:#fff}
h1{font-size:24px;margin:8px 0 4px}h3{font-size:15px;margin:18px 0 6px}h2{font-size:19px;margin:32px 0 8px;padding-bottom:4px;
border-bottom:1px solid #d8dde6}p{margin:6px 0}ul{margin:6px 0 6px 22px;padding:0}
nav{font-size:13px;margin:8px 0 16px}nav a{margin-right:12px;color:#2456a6;text-decoration:none}
.scroll{overflow-x:auto;margin:8px 0}body>.scroll{margin-right:min(0px,616px - 50vw)}table{border-collapse:collapse;font-size:12px}
caption{text-align:left;font-weight:600;padding:4px 0}
th,td{border:1px solid #d8dde6;padding:4px 5px;vertical-align:top}
th{background:#f2f4f8;text-align:left;font-size:11.5px}td.r{text-align:right}
tr:nth-child(even) td{background:#fafbfc}.note{font-size:12px;color:#5b6474}
img{max-width:100%;height:auto;border:1px solid #e5e8ee;margin:8px 0}
.sev-error{color:#b3261e;font-weight:600}.sev-warning{color:#9a6700;font-weight:600}
.sev-info{color:#2456a6}
code{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;background:#f2f4f8;padding:1px 4px;
border-radius:3px}code span{white-space:nowrap}
section.lead{background:#f6f9fe;border:1px solid #d3def0;border-radius:6px;padding:2px 18px 10px;
margin:12px 0 18px}section.lead h2{border:0;margin-top:12px}
"""


def to_html(title: str, intro: list[Any], sections: list[Section]) -> str:
    """The page: title, the lead sections (the report's answer) set apart, the intro, a
    table of contents, then every other section."""
    rest = [s for s in sections if not s.lead]
    nav = "".join(f'<a href="#{_anchor(s)}">{html.escape(s.title)}</a>' for s in rest)
    body = [f"<h1>{html.escape(title)}</h1>"]
    for s in sections:
        if s.lead:
            body.append(f'<section class="lead" id="{_anchor(s)}">'
                        f"<h2>{html.escape(s.title)}</h2>")
            body += [_html_block(b) for b in s.blocks] + ["</section>"]
    body += [_html_block(b) for b in intro]
    if rest:
        body.append(f"<nav>{nav}</nav>")
    for s in rest:
        body.append(f'<h2 id="{_anchor(s)}">{html.escape(s.title)}</h2>')
        body += [_html_block(b) for b in s.blocks]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _anchor(s: Section) -> str:
    return s.anchor or "".join(c if c.isalnum() else "-" for c in s.title.lower())


CODE = re.compile(r"`([^`]+)`")


def inline(text: str) -> str:
    """Escaped HTML of one line of text: `code` spans become <code>; a stray backtick is
    dropped (it would show as a literal character)."""
    parts = CODE.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(html.escape(part.replace("`", "")))
            continue
        # a command wraps between its words only, never inside '--repeats'
        words = " ".join(f"<span>{html.escape(w)}</span>" for w in part.split(" "))
        out.append(f"<code>{words}</code>")
    return "".join(out)


def _html_text(t: Text) -> str:
    lines = t.text.splitlines()
    cls = ' class="note"' if t.note else ""
    out, items = [], []
    for line in lines + [""]:
        if line.startswith("- "):
            items.append(f"<li>{inline(line[2:])}</li>")
            continue
        if items:
            out.append(f"<ul{cls}>{''.join(items)}</ul>")
            items = []
        if line.strip():
            out.append(f"<p{cls}>{inline(line)}</p>")
    return "\n".join(out)


# A table as wide as its content may be wider than the page (20 columns of the runs table:
# 1696 px in a 1200 px column, its last five out of sight), so cells wrap: words break after
# "_", "/", "=" and "," (``<wbr>``: a run name like mobilenet_v3_small-b256, a point like
# batch_size=16), a number stays with its short unit ("50.0 ms", "3.0 GiB": a no-break space)
# and wraps before its interval; a section's table reaches past the text column to the window's
# right edge, 16 px short (``.scroll``'s right margin: the body is 1200 px wide, centred, so its
# right edge is at 50vw + 600px). Horizontal scrolling stays for what still does not fit.
_TAG = re.compile(r"(<[^>]*>)")
_BREAK = re.compile(r"(?<=[_/=])(?=[^\s<])|(?<=,)(?=[^\s<\d])")  # never inside 1,007
_UNIT = re.compile(r"(?<=\d) (?=(?:[A-Za-z\u00b5]{1,3}|%)(?![A-Za-z]))")  # 50 ms, 3.0 GiB


def _wrappable(html_text: str) -> str:
    """``<wbr>`` after the characters a long word may break at, outside tags."""
    return "".join(part if part.startswith("<") else _BREAK.sub("<wbr>", part)
                   for part in _TAG.split(html_text))


def _html_block(block: Any) -> str:
    if isinstance(block, Sub):
        return f"<h3>{inline(block.title)}</h3>"
    if isinstance(block, Text):
        return _html_text(block)
    if isinstance(block, Table):
        right = block.right or [i > 0 for i in range(len(block.headers))]
        head = "".join(f"<th{_min_width(block, i)}>{_wrappable(inline(str(h)))}</th>"
                       for i, h in enumerate(block.headers))
        rows = []
        for row in block.rows:
            cells = []
            for i, c in enumerate(row):
                numeric = i < len(right) and right[i]
                cls = ' class="r"' if numeric else ""
                cells.append(f"<td{cls}>{_wrappable(_cell_html(c, numeric))}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
        cap = f"<caption>{inline(block.caption)}</caption>" if block.caption else ""
        return (f'<div class="scroll"><table>{cap}<thead><tr>{head}</tr></thead><tbody>'
                + "".join(rows) + "</tbody></table></div>")
    if isinstance(block, Image):
        data = base64.b64encode(block.png).decode("ascii")
        meta = (f' data-plot="{html.escape(json.dumps(block.meta), quote=True)}"'
                if block.meta is not None else "")
        return (f'<figure data-name="{html.escape(block.name)}"{meta}>'
                f'<img alt="{html.escape(block.alt)}" src="data:image/png;base64,{data}">'
                "</figure>")
    raise TypeError(f"unknown block {type(block).__name__}")


def _min_width(table: Table, i: int) -> str:
    width = table.min_width.get(i)
    if width is None or not re.fullmatch(r"\d+(\.\d+)?(em|px|ch)", width):
        return ""
    return f' style="min-width:{width}"'


def _cell_html(c: Any, numeric: bool = False) -> str:
    if numeric and not isinstance(c, Long):
        c = _UNIT.sub("\u00a0", str(c))
    if isinstance(c, Long):
        head = c.head()
        if head is None:
            return inline(c.text)
        return (f"<details><summary>{inline(head)} ...</summary>{inline(c.text)}</details>")
    text = str(c)
    for sev in ("error", "warning", "info"):
        if text == sev:
            return f'<span class="sev-{sev}">{sev}</span>'
    return inline(text)
