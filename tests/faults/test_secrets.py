"""Secrets, defence in depth: a planted API key value must never reach a stored file or a
printed string, wherever it turns up: in the server process's command line under a flag
speclab does not know, in an error body that quotes the request's headers, in a server log,
in an executed notebook or its HTML report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from speclab.cli import main
from speclab.cli.workbook import export_html, scrub_notebook
from speclab.runs import redact, redact_argv
from speclab.serve.launch import ManagedServer, ServerLaunch, free_port
from speclab.urls import remember_secret_variable, strip_credentials_in_text

ROOT = Path(__file__).resolve().parents[2]
# A value no code path would produce by itself; an unremarkable variable name, so that only
# naming it in api_key_env (not its name) marks it as a secret.
PLANTED = "sk-PLANTED-7f3a9c2e41d0"
VARIABLE = "TEAM_GATEWAY_VAR"


def every_text(folder: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            yield path, path.read_bytes().decode(errors="replace")


def assert_nowhere(folder: Path, *printed: str) -> None:
    for path, text in every_text(folder):
        assert PLANTED not in text, f"the key is in {path.relative_to(folder)}"
    for text in printed:
        assert PLANTED not in text, "the key was printed"


@pytest.fixture
def keyed_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fault server in its own process on this machine, behind the planted key, started with
    the key under flags speclab does not know; its 503 error bodies quote the request's
    Authorization header. Yields its URL."""
    monkeypatch.setenv(VARIABLE, PLANTED)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/faults/fault_server.py"), "status", "--require-key", "--echo-auth",
         "--api-key", PLANTED, "--upstream-blob", PLANTED, f"--relay={PLANTED}", f"GATEWAY={PLANTED}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_probe_and_bench_hide_the_key_from_every_file_and_every_line(
        keyed_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str) -> None:
    rc_probe = main(["probe", "--endpoint", keyed_server, "--api-key-env", VARIABLE])
    probe = capsys.readouterr()
    assert rc_probe == 0, probe.err
    assert "--upstream-blob" in probe.out  # the server's command line was read and shown...
    out = tmp_path / "run"
    rc = main(["bench", "--endpoint", keyed_server, "--api-key-env", VARIABLE, "--out", str(out), "--quiet",
               "--categories", "summarization", "--per-category", "2", "--concurrency", "2",
               "--warmup-requests", "0", "--max-tokens", "8", "--request-timeout-s", "5", "--workers", workers])
    bench = capsys.readouterr()
    assert rc == 1  # every request failed with the echoing 503
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert rows and all("Authorization: Bearer <redacted>" in row["error"] for row in rows)
    manifest = json.loads((out / "manifest.json").read_text())
    assert "--upstream-blob" in manifest["server"]["cmdline"]  # ...and stored
    assert manifest["params"]["api_key_env"] == VARIABLE  # the name is kept, never the value
    assert_nowhere(out, probe.out, probe.err, bench.out, bench.err)


def test_an_error_sentence_quoting_the_key_is_printed_without_it(
        keyed_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the key as a prompt file's name: the CLI's one sentence names the file it could not read
    rc = main(["bench", "--endpoint", keyed_server, "--api-key-env", VARIABLE, "--out", str(tmp_path / "run"),
               "--prompts", str(tmp_path / f"{PLANTED}.jsonl"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("speclab: ") and "<redacted>" in err
    assert_nowhere(tmp_path, err)


def test_redaction_of_command_lines_values_and_free_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, PLANTED)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-0123456789abcdef")  # a secret-looking name counts alone
    argv = ["vllm", "serve", "m", "--api-key", "k-one-secret", "--hf-token=hf-two-secret", "--disable-auth",
            "--port", "8000", "HF_TOKEN=hf-three-secret", "--unknown", "k-one-secret"]
    clean = redact_argv(argv)
    assert clean == ["vllm", "serve", "m", "--api-key", "<redacted>", "--hf-token=<redacted>", "--disable-auth",
                     "--port", "8000", "HF_TOKEN=<redacted>", "--unknown", "<redacted>"]
    # values seen under a secret flag are hidden from later text too (a server's log line)
    assert strip_credentials_in_text("args: {'api_key': 'k-one-secret', 'x': 'hf-two-secret'}") == \
        "args: {'api_key': '<redacted>', 'x': '<redacted>'}"
    assert strip_credentials_in_text("curl -H 'Authorization: Bearer abcdef123456'") == \
        "curl -H 'Authorization: Bearer <redacted>'"
    assert "tok-0123456789abcdef" not in strip_credentials_in_text("sent tok-0123456789abcdef")
    assert strip_credentials_in_text("max_tokens 256, port 8000") == "max_tokens 256, port 8000"
    prose = "Basic arithmetic first; Bearer bonds pay coupons; authorization: granted."
    assert strip_credentials_in_text(prose) == prose  # words, not tokens
    assert strip_credentials_in_text('{"Authorization": "Basic Ym9iOmh1bnRlcjI="}') == \
        '{"Authorization": "Basic <redacted>"}'
    assert strip_credentials_in_text("token Bearer eyJhbGciOiJIUzI1NiJ9.abc") == "token Bearer <redacted>"
    remember_secret_variable(VARIABLE)  # what `speclab` does with the api_key_env it is given
    assert redact({"notes": [f"key={PLANTED}"], "max_tokens": 8}) == {"notes": ["key=<redacted>"], "max_tokens": 8}


def test_a_managed_servers_log_never_holds_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that prints its arguments (as vLLM prints its non-default args) and its
    environment: the run folder's server log holds neither the key nor the token."""
    monkeypatch.setenv(VARIABLE, PLANTED)
    script = tmp_path / "server.py"
    script.write_text(
        "import http.server, os, sys\n"
        "print('non-default args:', sys.argv[1:], flush=True)\n"
        "print('env token:', os.environ.get('HF_TOKEN'), flush=True)\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "    def log_message(self, *a):\n"
        "        print('request', *a, flush=True)\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()\n")
    port = free_port()
    launch = ServerLaunch(engine="vllm", model="m", port=port, python=sys.executable,
                          extra_args=["--api-key", "launch-key-998877"], env={"HF_TOKEN": "hf-launch-445566"})
    monkeypatch.setattr(ServerLaunch, "command", lambda self: [sys.executable, str(script), "--port", str(port),
                                                                 *self.extra_args, "--note", PLANTED])
    remember_secret_variable(VARIABLE)  # what `speclab` does with the api_key_env it is given
    log = tmp_path / "server-baseline.log"
    with ManagedServer(launch, log, health_timeout_s=30):
        pass
    text = log.read_text()
    assert "non-default args:" in text and "env token:" in text
    for secret in (PLANTED, "launch-key-998877", "hf-launch-445566"):
        assert secret not in text


def test_an_executed_notebook_and_its_html_are_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, PLANTED)
    remember_secret_variable(VARIABLE)
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": 1, "id": "a", "metadata": {},
             "source": ["import os\n", "print(os.environ['TEAM_GATEWAY_VAR'])"],
             "outputs": [{"name": "stdout", "output_type": "stream", "text": [PLANTED + "\n"]},
                         {"output_type": "error", "ename": "SpeclabError", "evalue": f"refused {PLANTED}",
                          "traceback": [f"headers={{'Authorization': 'Bearer {PLANTED}'}}"]},
                         {"output_type": "display_data", "metadata": {},
                          "data": {"text/plain": [f"<{PLANTED}>"], "text/html": [f"<b>{PLANTED}</b>"]}}]},
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    executed = tmp_path / "notebook.ipynb"
    executed.write_text(json.dumps(notebook))
    assert scrub_notebook(executed)
    html = export_html(executed, tmp_path / "report.html")
    assert "&lt;redacted&gt;" in html.read_text() or "<redacted>" in html.read_text()
    assert_nowhere(tmp_path)
    assert not scrub_notebook(executed)  # nothing left to hide


def test_speclab_run_scrubs_what_a_notebook_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real papermill run of a notebook whose cell prints the key (as a careless debugging
    cell would) and fails quoting it: the executed notebook, its HTML, the manifest and the
    error sentence hold no key."""
    import nbformat

    from speclab.cli import workbook
    from speclab.errors import SpeclabError

    monkeypatch.setenv(VARIABLE, PLANTED)
    source = tmp_path / "nb" / "99-leaky.ipynb"
    source.parent.mkdir()
    cells = [nbformat.v4.new_code_cell("api_key_env = None  # the variable's name", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("import os\nprint('debug:', os.environ[api_key_env])"),
             nbformat.v4.new_code_cell("raise RuntimeError('refused the key ' + os.environ[api_key_env])")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), source)
    monkeypatch.setattr(workbook, "notebook_path", lambda name: source)
    with pytest.raises(SpeclabError) as failure:
        workbook.run_notebook("99-leaky", [], [f"api_key_env={VARIABLE}"], outputs_root=str(tmp_path / "out"))
    assert PLANTED not in failure.value.message
    executed = next((tmp_path / "out").rglob("notebook.ipynb"))
    assert "debug: <redacted>" in executed.read_text()
    assert (executed.parent / "report.html").exists()
    assert_nowhere(tmp_path / "out")
