"""Run folders: ``outputs/YYYY-MM-DD/HHMMSS-<name>/`` with a manifest written first.

A run never overwrites another. ``manifest.json`` is written before any measurement
(params, git sha + dirty flag, package versions, UTC start) and finalised last (end
time, status, error). Secrets never enter it: keys that look like credentials are
redacted wherever they appear.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from speclab.errors import SpeclabError
from speclab.paths import repo_root
from speclab.urls import (
    REDACTED,
    is_secret_name,
    remember_secret,
    remember_secret_variable,
    strip_credentials_in_text,
)

MANIFEST = "manifest.json"
PACKAGES = (
    "speclab", "httpx", "pandas", "numpy", "scipy", "seaborn", "papermill", "pydantic",
    "prometheus-client", "orjson", "uvloop",
)
_NAME_OK = re.compile(r"[^A-Za-z0-9._-]+")


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM (see :func:`terminate_like_ctrl_c`): handled like
    Ctrl-C (measured data kept, servers stopped), but recorded as ``terminated``."""


def terminate_like_ctrl_c() -> None:
    """From now on SIGTERM raises :class:`Terminated` in the main thread, so a ``kill`` or a
    batch scheduler's stop finalises the manifest instead of leaving it at ``running``."""
    import signal
    import threading

    def on_sigterm(signum: int, frame: object) -> None:
        raise Terminated("terminated by SIGTERM")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)


def utc_now() -> str:
    """Current UTC time, ISO 8601 with a Z."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_outputs_root() -> Path:
    """``SPECLAB_OUTPUTS`` or ``outputs/`` of the checkout (the working directory otherwise)."""
    env = os.environ.get("SPECLAB_OUTPUTS")
    if env:
        return Path(env)
    return repo_root() / "outputs"


def new_run_dir(name: str, outputs_root: str | Path | None = None, now: dt.datetime | None = None) -> Path:
    """Create and return a fresh ``<root>/YYYY-MM-DD/HHMMSS-<name>/`` (suffixed if taken)."""
    root = Path(outputs_root) if outputs_root is not None else default_outputs_root()
    stamp = (now or dt.datetime.now()).astimezone()
    safe = _NAME_OK.sub("-", name).strip("-") or "run"
    day = root / stamp.strftime("%Y-%m-%d")
    base = f"{stamp.strftime('%H%M%S')}-{safe}"
    for attempt in range(1000):
        candidate = day / (base if attempt == 0 else f"{base}-{attempt + 1}")
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            continue
        except OSError as exc:
            raise SpeclabError(
                f"Cannot create the run folder {candidate}: {exc.strerror}; "
                "check that the outputs folder is writable."
            ) from None
    raise SpeclabError(f"Too many runs named {safe!r} this second in {day}; wait a second and retry.")


def _is_secret_key(key: Any) -> bool:
    # api_key_env names a variable, it holds no secret: keep it so a rerun knows which to export.
    return is_secret_name(str(key))


def redact(value: Any) -> Any:
    """A copy of value with credential-looking keys replaced by '<redacted>', and every string
    made safe to store (no ``user:password@``, no known secret value: `urls.strip_credentials_in_text`)."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if _is_secret_key(k) and v not in (None, "") else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return strip_credentials_in_text(value)
    return value


def redact_argv(argv: list[str]) -> list[str]:
    """A command line safe to store: the values of ``--api-key``-like flags and ``NAME=value``
    secret-looking variables hidden (and remembered, so that the same value is hidden from
    every later string, a server log line say), then every known secret value hidden wherever
    it stands, under flags speclab does not know too."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("-"):  # a flag next: the secret-looking one was a switch
                remember_secret(arg)
                out.append(REDACTED)
                continue
        name, eq, value = arg.partition("=")
        if name.startswith("-") and is_secret_name(name.lstrip("-")):
            if eq:
                remember_secret(value)
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        if eq and not name.startswith("-") and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and is_secret_name(name):
            remember_secret(value)
            out.append(f"{name}={REDACTED}")
            continue
        out.append(arg)
    return [strip_credentials_in_text(arg) for arg in out]


def git_state(path: Path | None = None) -> dict[str, Any]:
    """The checkout's commit and whether it has uncommitted changes (None outside git)."""
    cwd = path or repo_root()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"sha": None, "dirty": None}
    if sha.returncode != 0:
        return {"sha": None, "dirty": None}
    return {"sha": sha.stdout.strip(), "dirty": bool(status.stdout.strip())}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of the packages that shape the numbers."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    return str(obj)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file + rename), so a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default, allow_nan=False) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """Read a JSON file, with one clear sentence when it is missing or broken."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpeclabError(f"{path} does not exist; check the run folder.") from None
    except json.JSONDecodeError as exc:
        raise SpeclabError(f"{path} is not valid JSON (line {exc.lineno}); the run may have crashed.") from None


def json_record(source: str | Path | dict[str, Any], *, what: str, fix: str) -> dict[str, Any]:
    """A saved measurement given as a dict, or read from the JSON file it was saved to; a
    missing or broken file is one sentence naming ``what`` it should hold and the ``fix``."""
    if isinstance(source, dict):
        return source
    path = Path(source)
    if not path.exists():
        raise SpeclabError(f"No {what} at {path}; {fix}.")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise SpeclabError(f"{path} is not {what} JSON; {fix}.") from None
    if not isinstance(record, dict):
        raise SpeclabError(f"{path} is not {what} JSON (not an object); {fix}.")
    return record


def check_run_dir(run_dir: str | Path) -> Path:
    """Raise one sentence unless ``run_dir`` can become a new run folder: not a file, not a
    finished run, and inside a folder this process may write to. Creates nothing."""
    path = Path(run_dir)
    if path.exists() and not path.is_dir():
        raise SpeclabError(f"--out {path} is a file; give a folder for the run (a new one is best).")
    if (path / MANIFEST).exists():
        raise SpeclabError(f"{path} already holds a run; give a new --out folder (runs are never overwritten).")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SpeclabError(f"--out {path} lies under the file {existing}; give a folder path.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpeclabError(f"Cannot write the run folder {path}: {existing} is not writable; choose another --out.")
    return path


def run_id(path: str | Path) -> str:
    """A run's name without the machine's folders: ``2026-12-01/053012-01-baseline-default``
    (what notebooks and reports print: a shared HTML never shows a local path)."""
    folder = Path(path)
    return f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name


def _cpu_flags_and_model() -> tuple[set[str], str]:
    flags: set[str] = set()
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
            elif key.strip() == "model name" and value.strip():
                model = value.strip()
    return flags, model


def host_info() -> dict[str, Any]:
    """This machine as a run's manifest records it: platform, CPUs, CPU model and the widest
    vector ISA it has (a CPU engine's speed, and speculation's verdict, depend on it)."""
    flags, model = _cpu_flags_and_model()
    isa = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags
           else "ASIMD" if "asimd" in flags else platform.machine())
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu_model": model, "isa": isa,
            "bf16": "avx512_bf16" in flags or "amx_bf16" in flags}


def host_class(host: dict[str, Any] | None) -> str:
    """The class of host a CPU-engine figure holds for: CPU model, vector ISA and CPU count
    (``AMD EPYC, AVX-512, 2 CPUs``); ``unknown host`` for a manifest that did not record it."""
    if not host or not host.get("isa"):
        return "unknown host"
    return f"{host.get('cpu_model') or '?'}, {host['isa']}, {host.get('cpus')} CPUs"


class Run:
    """A run folder and its manifest."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest

    @property
    def id(self) -> str:
        """The run's id (:func:`run_id`), never its local path."""
        return run_id(self.path)

    @classmethod
    def create(
        cls,
        name: str,
        params: Any = None,
        *,
        kind: str | None = None,
        outputs_root: str | Path | None = None,
        run_dir: str | Path | None = None,
    ) -> Run:
        """Make the folder (or adopt ``run_dir`` given by the runner) and write the manifest."""
        if run_dir is not None:
            path = Path(run_dir)
            path.mkdir(parents=True, exist_ok=True)
        else:
            path = new_run_dir(name, outputs_root)
        plain = _plain(params)
        if isinstance(plain, dict):  # the key its api_key_env names is hidden from all the run stores
            remember_secret_variable(plain.get("api_key_env"))
        manifest = {
            "schema": 1,
            "name": name,
            "kind": kind or name,
            "status": "running",
            "started_utc": utc_now(),
            "finished_utc": None,
            "error": None,
            "params": redact(plain),
            "git": git_state(),
            "packages": package_versions(),
            "python": sys.version.split()[0],
            "host": host_info(),
            "server": None,
        }
        existing = path / MANIFEST
        if existing.exists():
            # The runner wrote one first: keep its start time and extra fields (notebook,
            # runner, report paths); the notebook's validated params are the complete ones.
            previous = read_json(existing)
            manifest = {**previous, **manifest, "started_utc": previous.get("started_utc") or manifest["started_utc"]}
        run = cls(path, manifest)
        run.save()
        return run

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """An existing run folder."""
        folder = Path(path)
        return cls(folder, read_json(folder / MANIFEST))

    def save(self) -> None:
        write_json(self.path / MANIFEST, self.manifest)

    def set_server(self, identity: Any) -> None:
        """Record the server identity (engine, version, model, launch, spec config, load time)."""
        self.manifest["server"] = redact(_plain(identity))
        self.save()

    def update(self, **fields: Any) -> None:
        self.manifest.update(redact(_plain(fields)))
        self.save()

    def finalize(self, status: str = "ok", error: str | None = None) -> None:
        """Mark the run finished; ``status`` is ok, degraded, failed, interrupted or
        terminated. An ``ok`` after a sweep whose outcome was ``degraded`` (see
        :mod:`speclab.outcome`) stays ``degraded``, with the outcome's sentence."""
        outcome = self.manifest.get("outcome") or {}
        if status == "ok" and outcome.get("status") == "degraded":
            status, error = "degraded", error or outcome.get("sentence")
        self.manifest["status"] = status
        self.manifest["error"] = strip_credentials_in_text(error) if error else error
        self.manifest["finished_utc"] = utc_now()
        try:
            self.save()
        except OSError:
            # Disk full: a new manifest cannot be written, but the old one's bytes can be
            # overwritten in place, so the run at least stops claiming to be running.
            self._mark_failed_in_place()
            raise

    def _mark_failed_in_place(self) -> None:
        path = self.path / MANIFEST
        with contextlib.suppress(OSError), open(path, "r+b") as handle:
            text = handle.read()
            at = text.find(b'"status": "running"')
            if at >= 0:
                handle.seek(at)
                handle.write(b'"status": "failed" ')  # same length: no new disk block needed

    @contextlib.contextmanager
    def recording(self, finalize_ok: bool = True) -> Iterator[Run]:
        """Finalise as failed (with the error sentence) or interrupted on an exception, and
        as ok at the end unless ``finalize_ok`` is False (later steps still belong to the run)."""
        try:
            yield self
        except Terminated:
            self.finalize("terminated", "terminated by SIGTERM; the records measured so far are kept")
            raise
        except KeyboardInterrupt:
            self.finalize("interrupted", "interrupted by the user")
            raise
        except BaseException as exc:
            message = exc.message if isinstance(exc, SpeclabError) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                message = "The disk is full; free space and run again (records written so far are kept)."
            with contextlib.suppress(OSError):  # keep the original error, not the failed write
                self.finalize("failed", message)
            raise
        else:
            if finalize_ok:
                self.finalize("ok")


def _plain(value: Any) -> Any:
    if value is None:
        return None
    return json.loads(json.dumps(value, default=_json_default))


def list_runs(outputs_root: str | Path | None = None, kind: str | None = None) -> list[Path]:
    """Run folders (those holding a manifest), oldest first, optionally of one kind."""
    root = Path(outputs_root) if outputs_root is not None else default_outputs_root()
    found: list[tuple[str, Path]] = []
    for manifest in root.glob(f"*/*/{MANIFEST}"):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if kind is None or data.get("kind") == kind:
            found.append((data.get("started_utc") or "", manifest.parent))
    return [path for _, path in sorted(found)]
