"""The one base-URL normaliser: every request speclab makes builds its URL here.

Users paste ``http://h:8000``, ``http://h:8000/`` or ``http://h:8000/v1``; OpenAI-style
clients want the ``/v1`` form, while ``/metrics``, ``/health``, ``/tokenize``, ``/version``
and ``/start_profile`` live at the server root. Joining ``.../v1`` with ``/v1/chat/...``
gave the motivating team a 404, and resolving ``/metrics`` against ``/v1`` silently
dropped their acceptance numbers (docs/measurement.md section 4).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from speclab.errors import SpeclabError

# Paths served at the server root by vLLM and SGLang, never under /v1.
ROOT_PATHS = (
    "/health",
    "/metrics",
    "/version",
    "/tokenize",
    "/detokenize",
    "/start_profile",
    "/stop_profile",
    "/server_info",
    "/get_server_info",
    "/get_model_info",
    "/reset_prefix_cache",
)


def strip_credentials(url: str) -> str:
    """``url`` without ``user:password@``: what may be stored or printed (a password in the
    endpoint URL must never reach a manifest, a notebook, a report or an error message)."""
    if "@" not in url:
        return url
    parts = urlsplit(url if "://" in url else "//" + url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    clean = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return clean if "://" in url else clean.lstrip("/")


_URL_WITH_CREDENTIALS = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^/@\s\"']+@", re.I)


def strip_credentials_in_text(text: str) -> str:
    """Every ``scheme://user:pass@`` in free text (an error, a command line) without the credentials."""
    return _URL_WITH_CREDENTIALS.sub(r"\1", text) if "@" in text else text


# ``speclab run`` hands a notebook the endpoint without its password (the executed notebook
# is kept) and the full URL in this variable of the kernel's environment.
ENDPOINT_URL_ENV = "SPECLAB_ENDPOINT_URL"


def hide_credentials(url: str | None) -> str | None:
    """``url`` without credentials, the full one kept in ``$SPECLAB_ENDPOINT_URL`` for this
    process and its children (the notebook kernel); see :func:`restore_credentials`."""
    if not url or strip_credentials(url) == url:
        return url
    os.environ[ENDPOINT_URL_ENV] = url
    return strip_credentials(url)


def restore_credentials(url: str | None) -> str | None:
    """The full URL from ``$SPECLAB_ENDPOINT_URL`` when it names the same server as ``url``."""
    full = os.environ.get(ENDPOINT_URL_ENV)
    if not url or not full:
        return url
    try:
        same = Endpoint.parse(full).public == Endpoint.parse(url).public
    except SpeclabError:
        return url
    return full if same else url


@dataclass(frozen=True)
class Endpoint:
    """A server's root URL, e.g. ``http://127.0.0.1:8000`` (no trailing slash, no /v1).

    ``root`` keeps any ``user:password@`` because requests need it; ``public`` (and
    ``str()``) drop it: use those for anything stored or printed.
    """

    root: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """Accept ``host:port``, ``http://h:p``, ``http://h:p/`` or ``http://h:p/v1[/]``."""
        text = (url or "").strip()
        if not text:
            raise SpeclabError("The endpoint is empty; give the server URL, e.g. http://127.0.0.1:8000.")
        if "://" not in text:
            text = "http://" + text
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpeclabError(
                f"The endpoint {strip_credentials(text)!r} is not an http(s) URL; give it as http://host:port."
            )
        if parts.query or parts.fragment:
            raise SpeclabError(
                f"The endpoint {strip_credentials(text)!r} carries a query or fragment; give only http://host:port[/prefix]."
            )
        path = parts.path.rstrip("/")
        # Strip any number of trailing /v1 segments (a doubled /v1 is the classic bug).
        while path.endswith("/v1"):
            path = path[: -len("/v1")].rstrip("/")
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            raise SpeclabError(f"The endpoint {strip_credentials(text)!r} has an invalid port; use http://host:port.") from exc
        return cls(urlunsplit((parts.scheme, parts.netloc, path, "", "")))

    @property
    def v1(self) -> str:
        """The OpenAI-compatible base, ``<root>/v1``."""
        return self.root + "/v1"

    def api(self, path: str) -> str:
        """URL of an OpenAI API path: ``api("chat/completions")`` -> ``<root>/v1/chat/completions``."""
        clean = "/" + path.lstrip("/")
        if clean.startswith("/v1/") or clean == "/v1":
            clean = clean[3:] or "/"
        return self.v1 + clean

    def at_root(self, path: str) -> str:
        """URL of a root path: ``at_root("metrics")`` -> ``<root>/metrics``."""
        clean = "/" + path.lstrip("/")
        if clean.startswith("/v1/") and clean[3:] in ROOT_PATHS:
            clean = clean[3:]
        return self.root + clean

    @property
    def public(self) -> str:
        """The root without credentials: safe to store and print."""
        return strip_credentials(self.root)

    def without_credentials(self) -> Endpoint:
        """The same server without ``user:password@``: build request URLs from this and send
        the credentials as a header, so that an explicit API key is not overridden by them."""
        return Endpoint(self.public)

    @property
    def credentials(self) -> tuple[str, str] | None:
        """``(user, password)`` from the URL, or None."""
        parts = urlsplit(self.root)
        if parts.username is None:
            return None
        return unquote(parts.username), unquote(parts.password or "")

    @property
    def host(self) -> str:
        return urlsplit(self.root).hostname or ""

    @property
    def port(self) -> int:
        parts = urlsplit(self.root)
        return parts.port or (443 if parts.scheme == "https" else 80)

    def __str__(self) -> str:
        return self.public

    def __repr__(self) -> str:
        return f"Endpoint({self.public!r})"
