"""API keys for servers started with ``--api-key``: read from the environment, sent everywhere.

The key itself is never stored: params, manifests and notebooks hold only the *name* of the
environment variable (``api_key_env``), and the value is read when a request is made. Once read,
the value is hidden from every string speclab stores or prints (`urls.remember_secret`), should
it turn up elsewhere: in a server's log, a command line, an error body. Every
request speclab sends to a server (probe, models, metrics, chat, tokenize, cache resets)
carries it, because vLLM's ``--api-key`` protects every route under ``/v1`` and some
deployments put ``/metrics`` behind the same key.
"""

from __future__ import annotations

import base64
import os

from speclab.errors import SpeclabError
from speclab.urls import Endpoint, remember_secret

__all__ = ["auth_headers", "auth_refused", "basic_auth_headers"]


def auth_headers(api_key_env: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}`` from ``$api_key_env`` ({} when no variable is named);
    raises SpeclabError when the variable is named but unset or empty."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise SpeclabError(
            f"The environment variable {api_key_env} (api_key_env) is not set; export the API key there."
        )
    remember_secret(key)  # hidden from every string stored or printed from now on
    return {"Authorization": f"Bearer {key}"}


def auth_refused(status: int, where: str, api_key_env: str | None) -> SpeclabError:
    """The one-sentence error for a 401/403 answer from ``where`` (a URL without credentials)."""
    if api_key_env:
        return SpeclabError(
            f"{where} refused the API key from ${api_key_env} (HTTP {status}); export the key the "
            f"server was started with in {api_key_env}."
        )
    return SpeclabError(
        f"{where} needs an API key (HTTP {status}); export it in an environment variable and name "
        "that variable with --api-key-env (api_key_env in params)."
    )


def basic_auth_headers(endpoint: Endpoint) -> dict[str, str]:
    """HTTP Basic auth for an endpoint given as ``http://user:password@host`` ({} otherwise):
    the credentials are sent, never stored or printed."""
    credentials = endpoint.credentials
    if credentials is None:
        return {}
    remember_secret(credentials[1])
    token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}
