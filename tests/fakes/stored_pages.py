"""Stored copies of the site's real pages (tests/data/item_pages/stored/), and each put back into HTML.

    load(name) -> StoredCopy             # its header (source, found, retrieved, shows, …) and its text
    part(copy, start, stop) -> StoredCopy   # the blocks from the one holding `start` to before `stop`'s
    as_html(copy) -> bytes               # its text and links in page order, in plain elements

No stored copy holds a page's HTML: they are renderings of pages as Markdown or as text (each file's header
says whose and where it was found). `as_html` puts what a copy holds back into HTML mechanically and does
nothing more: `[words](href)` is a link, `![alt](src)` an image, a block that is one line `# …` to `###### …`
a heading, a backslash ending a line (a crawler's line break) and Markdown's escapes (`\\*`, `\\|`, `\\-`)
are undone; every other block of lines is a paragraph; a text copy (`.txt`) is one paragraph a line. The
element names and classes the site uses are not known from these copies, and `bot.item_pages` depends on
none: it reads the text and the links, in order.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from tests.fakes.research_index import PAGES

STORED = PAGES / "stored"

_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(([^)\s]*)\)")
_LINK = re.compile(r"\[([^\]\n]*)\]\(([^)\s]*)\)")
_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|])")
_HEADING = re.compile(r"(#{1,6})\s+(.*)")
_PLACED = re.compile("\x00(\\d+)\x00")


@dataclass(frozen=True)
class StoredCopy:
    name: str
    header: dict[str, str]
    text: str

    @property
    def url(self) -> str:
        """The page's address (the header's `source`, without its note)."""
        return self.header["source"].split()[0]


def load(name: str) -> StoredCopy:
    head, text = (STORED / name).read_text(encoding="utf-8").split("\n---\n", 1)
    header = dict(line.split(": ", 1) for line in head.splitlines())
    return StoredCopy(name, header, text)


def part(copy: StoredCopy, start: str | None = None, stop: str | None = None) -> StoredCopy:
    """The copy's blocks (paragraphs) from the first holding `start` up to the first after it holding
    `stop` (exclusive); None: from the first, to the end."""
    blocks = _blocks(copy.text)
    first = next(n for n, block in enumerate(blocks) if start is None or start in block)
    last = next((n for n, block in enumerate(blocks) if n > first and stop is not None and stop in block),
                len(blocks))
    return StoredCopy(copy.name, copy.header, "\n\n".join(blocks[first:last]))


def as_html(copy: StoredCopy) -> bytes:
    if copy.name.endswith(".txt"):
        body = "".join(f"<p>{_inline(line)}</p>" for line in copy.text.splitlines() if line.strip())
    else:
        body = "".join(_block(block) for block in _blocks(copy.text))
    return (f'<!DOCTYPE html><html lang="en-US"><head><meta charset="utf-8"><title>{html.escape(copy.name)}'
            f"</title></head><body><main>{body}</main></body></html>").encode()


def _blocks(text: str) -> list[str]:
    lines = [line[:-1] if line.endswith("\\") else line for line in text.splitlines()]
    return [block.strip("\n") for block in "\n".join(lines).split("\n\n") if block.strip()]


def _block(block: str) -> str:
    heading = _HEADING.fullmatch(block) if "\n" not in block else None
    if heading is not None:
        level = len(heading.group(1))
        return f"<h{level}>{_inline(heading.group(2))}</h{level}>"
    return "<p>" + "<br>".join(_inline(line) for line in block.splitlines()) + "</p>"


def _inline(line: str) -> str:
    images: list[str] = []

    def image(found: re.Match[str]) -> str:
        images.append(f'<img alt="{html.escape(found.group(1))}" src="{html.escape(found.group(2))}">')
        return f"\x00{len(images) - 1}\x00"

    line = _IMAGE.sub(image, line)
    out, last = [], 0
    for found in _LINK.finditer(line):
        words = _HEADING.sub(r"\2", found.group(1))  # a teaser's link holds its heading: "[### Title](…)"
        link = f'<a href="{html.escape(found.group(2))}">{_text(words)}</a>'
        out += [_text(line[last:found.start()]), link]
        last = found.end()
    out.append(_text(line[last:]))
    return _PLACED.sub(lambda found: images[int(found.group(1))], "".join(out))


def _text(words: str) -> str:
    return html.escape(_ESCAPED.sub(r"\1", words), quote=False)
