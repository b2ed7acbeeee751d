"""The one base-URL normaliser: every request speclab makes builds its URL here.

Users paste ``http://h:8000``, ``http://h:8000/`` or ``http://h:8000/v1``; OpenAI-style
clients want the ``/v1`` form, while ``/metrics``, ``/health``, ``/tokenize``, ``/version``
and ``/start_profile`` live at the server root. Joining ``.../v1`` with ``/v1/chat/...``
gave the motivating team a 404, and resolving ``/metrics`` against ``/v1`` silently
dropped their acceptance numbers (docs/measurement.md section 4).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
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

# Names that hold a credential: api_key, hf_token, password, --auth-token... but not max_tokens,
# output_tokens or api_key_env (which names a variable and holds no secret).
SECRET_NAME = re.compile(
    r"(api[_-]?keys?|secret|passw(or)?d|authori[sz]ation|bearer|credential|(^|[_-])auth$|(^|[_-])token$)", re.I)
REDACTED = "<redacted>"
# an Authorization header's value, and a bare bearer token (long, with a digit: never prose)
_AUTH_HEADER = re.compile(r"(authorization['\"]?\s*[:=]\s*['\"]?(?:bearer|basic)\s+)[^\s'\",}<]+", re.I)
_BEARER = re.compile(r"\b(Bearer)\s+(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{16,}")
# Defence in depth: the *values* of keys speclab has read (an API key from `api_key_env`, the
# password of an endpoint URL, a value given to a secret-looking flag) are hidden from every
# string that is stored or printed, wherever they appear: under a flag speclab does not know,
# in a server's log line, in an error body. Environment variables with secret-looking names
# count too, when their value is long enough not to be an ordinary word.
_REMEMBERED: set[str] = set()
_MIN_REMEMBERED = 4
_MIN_FROM_ENVIRONMENT = 8
_NOT_A_VALUE = ("_FILE", "_PATH", "_DIR", "_URL", "_ENV")  # where a secret lives, not the secret
_pattern_cache: tuple[frozenset[str], re.Pattern[str] | None] = (frozenset(), None)


def is_secret_name(name: str) -> bool:
    """Whether a parameter, flag or variable name holds a credential (``api_key_env`` does not:
    it names the variable)."""
    return bool(SECRET_NAME.search(name)) and not name.lower().endswith("_env")


def remember_secret(value: str | None) -> None:
    """Hide ``value`` from every string speclab stores or prints from now on (this process)."""
    if value and len(value.strip()) >= _MIN_REMEMBERED:
        _REMEMBERED.add(value.strip())


def remember_secret_variable(name: str | None) -> None:
    """Hide the value of the environment variable ``name`` (an ``api_key_env``), if set."""
    if name:
        remember_secret(os.environ.get(name))


def secret_values() -> frozenset[str]:
    """Every value hidden now: those remembered, the password of ``$SPECLAB_ENDPOINT_URL`` and
    the values of secret-looking environment variables (``*_API_KEY``, ``HF_TOKEN``, ...)."""
    values = set(_REMEMBERED)
    for name, value in os.environ.items():
        if (len(value) >= _MIN_FROM_ENVIRONMENT and is_secret_name(name) and "://" not in value
                and not name.upper().endswith(_NOT_A_VALUE)):
            values.add(value)
    full = os.environ.get(ENDPOINT_URL_ENV)
    if full:
        parts = urlsplit(full if "://" in full else "//" + full)
        if parts.password and len(parts.password) >= _MIN_REMEMBERED:
            values.add(unquote(parts.password))
    return frozenset(values)


def _secret_pattern() -> re.Pattern[str] | None:
    global _pattern_cache
    values = secret_values()
    if values != _pattern_cache[0]:
        # longest first, so a key that contains another is hidden whole
        alternatives = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
        _pattern_cache = (values, re.compile(alternatives) if alternatives else None)
    return _pattern_cache[1]


def strip_credentials_in_text(text: str) -> str:
    """Free text (an error, a command line, a log line, a notebook output) safe to store or
    print: every ``scheme://user:pass@`` without the credentials, every ``Bearer``/``Basic``
    token and every known secret value (:func:`secret_values`) replaced by ``<redacted>``."""
    if not text:
        return text
    if "@" in text:
        text = _URL_WITH_CREDENTIALS.sub(r"\1", text)
    if "uthori" in text or "UTHORI" in text:
        text = _AUTH_HEADER.sub(rf"\1{REDACTED}", text)
    if "Bearer" in text:
        text = _BEARER.sub(rf"\1 {REDACTED}", text)
    pattern = _secret_pattern()
    return pattern.sub(REDACTED, text) if pattern is not None else text


# ``speclab run`` hands a notebook the endpoint without its password (the executed notebook
# is kept) and the full URL in this variable of the kernel's environment.
ENDPOINT_URL_ENV = "SPECLAB_ENDPOINT_URL"


def hide_credentials(url: str | None) -> str | None:
    """``url`` without credentials, the full one kept in ``$SPECLAB_ENDPOINT_URL`` for this
    process and its children (the notebook kernel); see :func:`restore_credentials`."""
    if not url or strip_credentials(url) == url:
        return url
    os.environ[ENDPOINT_URL_ENV] = url  # its password is a secret value from now on (secret_values)
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


# An absolute path of two or more parts, also after '=' or ':' (LD_PRELOAD lists), but not a
# URL's path (``http://h:8000/v1/models`` is kept: its slashes follow a word character).
_LOCAL_PATH = re.compile(r"(?<![\w/.~-])/(?:[\w.+@-]+/)+([\w.+@-]+)")


def scrub_paths(text: str) -> str:
    """The text with absolute local paths cut to their last part (``…/smollm2-135m``)."""
    return _LOCAL_PATH.sub(lambda m: f"…/{m.group(1)}", str(text))


def is_local_host(host: str) -> bool:
    """Whether ``host`` names this machine (loopback, or its own name)."""
    if host in ("localhost", ""):
        return True
    try:
        address = ipaddress.ip_address(socket.gethostbyname(host))
    except (OSError, ValueError):
        return False
    if address.is_loopback:
        return True
    with contextlib.suppress(OSError):
        return host in (socket.gethostname(), socket.getfqdn())
    return False
