"""MkDocs hook: a link from a page to a repository file outside docs/ (``../edgebed/ps/wire.py``,
``../../benchmarks/results/ps.json``) becomes the file's path in code, since the site has no copy of it;
an image from outside docs/ (a committed figure) is embedded in the page.

Only links whose target exists in the repository are rewritten; a link to a missing file is left as it
is, so the strict build still fails on it. One exception: a link to a page another branch is writing
(``nav.PENDING``) shows as its text until that page is in docs/, then as the link it is.
"""
from __future__ import annotations

import base64
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from nav import PENDING  # noqa: E402
from mkdocs.plugins import event_priority  # noqa: E402
from mkdocs.structure.files import InclusionLevel  # noqa: E402
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def repo_link(target: str, page_src: str) -> str | None:
    """The repository path a relative link from docs/<page_src> points to, when it leaves docs/ and the
    file or folder exists; otherwise None."""
    if re.match(r"[a-z]+:|/", target):
        return None
    resolved = ((DOCS / page_src).parent / target).resolve()
    try:
        resolved.relative_to(DOCS)
        return None                     # inside docs/: MkDocs checks it
    except ValueError:
        pass
    try:
        rel = resolved.relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return rel if resolved.exists() else None


def _embed(m, page_src: str) -> str:
    """An image from the repository outside docs/ (a committed figure): embedded in the page."""
    rel = repo_link(m.group(2), page_src)
    path = ROOT / rel if rel else None
    if path is None or path.suffix.lower() not in _MIME or path.stat().st_size > 2_000_000:
        return m.group(0)
    data = base64.b64encode(path.read_bytes()).decode()
    return f"![{m.group(1)}](data:{_MIME[path.suffix.lower()]};base64,{data})"


@event_priority(-200)   # after literate-nav (-100) has read SUMMARY.md into the nav
def on_files(files, config):
    """SUMMARY.md is the nav's source, not a page: it is left out of the site (and its search)."""
    summary = files.get_file_from_path("SUMMARY.md")
    if summary is not None:
        summary.inclusion = InclusionLevel.EXCLUDED
    return files


def on_page_markdown(markdown, page, config, files):
    markdown = _IMAGE.sub(lambda m: _embed(m, page.file.src_uri), markdown)
    def repl(m):
        text, target = m.group(1), m.group(2)
        if target in PENDING and not (DOCS / target).is_file():
            return text
        rel = repo_link(target, page.file.src_uri)
        if rel is None:
            return m.group(0)
        if text.strip("`") == rel or text.strip("`").endswith(Path(rel).name):
            return f"`{rel}`"
        return f"{text} (`{rel}`)"
    return _LINK.sub(repl, markdown)
