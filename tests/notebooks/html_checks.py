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
