"""What a shared notebook HTML must not show: this machine's folders."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def local_paths_in(html: str, *extra_roots: str | Path) -> list[str]:
    """Every place ``html`` names a folder of this machine (the checkout, home, temp, outputs),
    embedded images left out. Empty when the HTML is safe to send."""
    text = re.sub(r"data:image/[a-z]+;base64,[A-Za-z0-9+/=]+", "", html)
    roots = {str(ROOT), str(Path.home()), tempfile.gettempdir(), "/tmp/", "/work/",
             *(str(r) for r in extra_roots)}
    found = []
    for root in sorted(roots, key=len, reverse=True):
        for match in re.finditer(re.escape(root.rstrip("/") + "/"), text):
            found.append(text[max(match.start() - 40, 0):match.end() + 40].replace("\n", " "))
    return found


def assert_html_free_of_local_paths(run_folder: Path, *extra_roots: str | Path) -> None:
    found = local_paths_in((run_folder / "report.html").read_text(), *extra_roots)
    assert not found, f"{run_folder.name}'s HTML shows local paths: {found[:3]}"


# A number a reader sees with five or more decimals is a raw float left unformatted (0.00272 s
# where 2.72 ms was meant). Code cells are not in a speclab report's HTML; embedded images and
# the page's own styles and scripts are left out of the search.
_LONG_FLOAT = re.compile(r"(?<![\w.#-])\d+\.\d{5,}(?![\w.])")


def long_floats_in(html: str) -> list[str]:
    """Every number ``html`` shows with five or more decimals, with its surroundings."""
    text = re.sub(r"data:image/[a-z]+;base64,[A-Za-z0-9+/=]+", "", html)
    text = re.sub(r"<(style|script)\b.*?</\1>", "", text, flags=re.S | re.I)
    text = re.sub(r"<[^>]+>", " ", text)
    return [text[max(m.start() - 50, 0):m.end() + 20].replace("\n", " ") for m in _LONG_FLOAT.finditer(text)]


def assert_html_numbers_humane(run_folder: Path) -> None:
    found = long_floats_in((run_folder / "report.html").read_text())
    assert not found, f"{run_folder.name}'s HTML shows raw floats (five or more decimals): {found[:3]}"
