"""One exception type whose message is one clear sentence for the user."""

from __future__ import annotations


class SpeclabError(Exception):
    """A problem the user can act on: the message says what was wrong and what to do.

    ``detail`` carries supporting text (for instance the last lines of a server log) that
    the CLI prints under the sentence, never a Python traceback.
    """

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def __str__(self) -> str:
        if self.detail:
            return f"{self.message}\n{self.detail}"
        return self.message

    def _render_traceback_(self) -> list[str]:
        # IPython/Jupyter show this instead of a traceback: one sentence in notebooks too.
        lines = [f"speclab: {self.message}"]
        if self.detail:
            lines.extend(self.detail.splitlines())
        return lines


def explain_validation_error(exc: Exception, what: str = "parameters") -> SpeclabError:
    """Turn a pydantic ValidationError into one sentence naming the field and the fix."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return SpeclabError(f"Invalid {what}: {exc}")
    items = errors()
    if not items:
        return SpeclabError(f"Invalid {what}: {exc}")
    first = items[0]
    field = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    given = first.get("input")
    shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
    more = f"; {len(items) - 1} more problem(s) after this one" if len(items) > 1 else ""
    where = f"{field}: " if field else ""
    return SpeclabError(f"Invalid {what}: {where}{message}{shown}{more}; fix it and run again.")
