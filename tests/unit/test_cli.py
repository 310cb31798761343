"""The command-line contract that scripts and CI depend on (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from imagekit import __version__
from imagekit.cli import _COMMANDS, main
from imagekit.errors import CRASH_EXIT_CODE


def _leaves(command: click.Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(command, click.Group):
        return [
            leaf
            for name in command.list_commands(None)  # type: ignore[arg-type]
            for leaf in _leaves(command.get_command(None, name), (*path, name))  # type: ignore[arg-type]
        ]
    return [(path, command)]


@pytest.mark.parametrize("name", list(_COMMANDS))
def test_every_command_loads_and_offers_json(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    command = main.get_command(None, name)  # type: ignore[arg-type]
    assert command is not None and command.name == name
    for path, leaf in _leaves(command, (name,)):
        assert "--json" in {o for p in leaf.params for o in p.opts}, path
        shown = CliRunner().invoke(main, [*path, "--help"])
        assert shown.exit_code == 0 and "--json" in shown.output, path


def test_a_crash_is_its_own_exit_code_with_the_traceback_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception that is not an ImagekitError is a bug: exit 70 (not 1, "a check said
    no"), one line naming it and the traceback file, one JSON document under --json."""
    import imagekit.cli.inspect_cmd

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("layers")

    monkeypatch.setenv("IMAGEKIT_CRASH_DIR", str(tmp_path / "crashes"))
    monkeypatch.setattr(imagekit.cli.inspect_cmd, "inspect_image", broken)
    result = CliRunner().invoke(main, ["inspect", "--json", "127.0.0.1:1/x:y"])
    assert result.exit_code == CRASH_EXIT_CODE == 70
    document = json.loads(result.stdout)["error"]
    assert document["type"] == "crash" and document["exception"] == "KeyError"
    saved = Path(document["traceback"])
    assert saved.parent == tmp_path / "crashes" and "KeyError: 'layers'" in saved.read_text()
    assert "imagekit crashed: KeyError" in result.stderr and "bug" in result.stderr
    assert "Traceback" not in result.stderr
    human = CliRunner().invoke(main, ["inspect", "127.0.0.1:1/x:y"])
    assert human.exit_code == 70 and human.stdout == ""


def test_unknown_command_and_option_are_usage_errors() -> None:
    assert CliRunner().invoke(main, ["no-such-command"]).exit_code == 2
    assert CliRunner().invoke(main, ["inspect", "--no-such-option", "x"]).exit_code == 2


def test_bad_reference_is_one_json_document_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["inspect", "--json", "Example.com/UPPER:tag"])
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["error"]["exit_code"] == 2
    assert "Traceback" not in result.output


def test_malformed_digest_never_reaches_a_registry() -> None:
    result = CliRunner().invoke(main, ["inspect", "--json", "127.0.0.1:1/x@sha256:../../x"])
    assert result.exit_code == 2
    assert "malformed digest" in json.loads(result.stdout)["error"]["message"]


def test_console_script_entry_resumes_the_collector_and_skips_httpx_cli() -> None:
    # entry() pauses the cyclic GC while a command loads; the command itself must run with
    # it on again, and httpx's own CLI (rich, pygments) must not have been imported.
    script = (
        "import gc, sys\n"
        "from imagekit.cli import entry\n"
        "sys.argv = ['imagekit', 'mirror', '--help']\n"
        "try:\n"
        "    entry()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, gc.isenabled(), sys.modules.get('httpx._main', 'absent'),\n"
        "          'rich.console' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Usage: imagekit mirror" in done.stdout
    assert done.stderr.split() == ["0", "True", "None", "False"], done.stderr


def test_python_dash_m_is_the_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"imagekit, version {__version__}"


# ------------------------------------------------------------------ usage errors under --json


def _one_usage_document(result: Any) -> dict[str, Any]:
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)  # exactly one document: json.loads refuses two
    error = document["error"]
    assert error["exit_code"] == 2 and error["type"] == "UsageError"
    assert "Traceback" not in result.output
    return dict(error)


def _all_leaves() -> list[tuple[str, ...]]:
    return [
        path
        for name in _COMMANDS
        for path, _ in _leaves(main.get_command(None, name), (name,))  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize("path", _all_leaves(), ids=" ".join)
def test_an_unknown_option_under_json_is_one_document_and_exit_2(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--json", "--no-such-option"])
    error = _one_usage_document(result)
    assert "--no-such-option" in error["message"]
    assert "Error:" in result.stderr  # click's own text stays on stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["mirror", "--json", "127.0.0.1:1/only-src:1"],
        ["mirror", "--json", "--workers", "0", "127.0.0.1:1/a:1", "127.0.0.1:1/b:1"],
        ["ledger", "verify", "--json", "--ledger", "."],
        ["ledger", "show", "--json", "--kind", "no-such-kind"],
        ["--json", "no-such-command"],
    ],
    ids=["missing-argument", "workers-0", "folder-as-ledger", "bad-choice", "unknown-command"],
)
def test_usage_errors_under_json_are_one_document(argv: list[str]) -> None:
    _one_usage_document(CliRunner().invoke(main, argv))
    plain = CliRunner().invoke(main, [a for a in argv if a != "--json"])
    assert plain.exit_code == 2 and plain.stdout == ""


def test_a_usage_error_from_the_console_script_is_one_document() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "mirror", "--json", "--workers", "0", "a:1", "b:1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["exit_code"] == 2
    assert "--workers" in done.stderr


def test_a_malformed_platform_is_bad_input_before_any_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGEKIT_ROOT", str(tmp_path))  # had it got further: no evidence here
    monkeypatch.setenv("IMAGEKIT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.setenv("IMAGEKIT_EVIDENCE_DIR", str(tmp_path / "evidence"))
    for argv in (["mirror", "127.0.0.1:1/a:1", "127.0.0.1:1/b:1"], ["inspect", "127.0.0.1:1/a:1"]):
        result = CliRunner().invoke(main, [*argv, "--json", "--platform", "linux/../x"])
        assert result.exit_code == 2, result.output
        assert "malformed platform" in json.loads(result.stdout)["error"]["message"]


# ------------------------------------------------------------------ interrupts


def test_an_interrupt_is_exit_130_with_one_document(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C is neither "a check said no" (1) nor a crash: 130, and one JSON document."""
    import imagekit.cli.inspect_cmd

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(imagekit.cli.inspect_cmd, "inspect_image", interrupted)
    result = CliRunner().invoke(main, ["inspect", "--json", "127.0.0.1:1/x:y"])
    assert result.exit_code == 130
    document = json.loads(result.stdout)["interrupted"]
    assert document["signal"] == "SIGINT" and document["exit_code"] == 130
    assert "nothing was recorded" in document["message"]
    assert "Aborted" not in result.output and "interrupted" in result.stderr
    human = CliRunner().invoke(main, ["inspect", "127.0.0.1:1/x:y"])
    assert human.exit_code == 130 and human.stdout == ""


# Each command hands its options on by name (cli.options.parsed). A stage parameter renamed
# without its option would leave that option silently unused: this table is what each command
# keeps for itself (its --json, and what it converts or hands on positionally), so any other
# option that the stage does not take fails here.
_KEPT_BY_COMMAND = [
    (
        "build_cmd",
        None,
        "imagekit.builders.options:BuildOptions",
        {"as_json", "name", "no_assertions"},
    ),
    (
        "nightly_cmd",
        None,
        "imagekit.flows.nightly.options:NightOptions",
        {"as_json", "markdown", "plans"},
    ),
    (
        "pipeline_cmd",
        None,
        "imagekit.flows.pipeline:PipelineOptions",
        {"as_json", "fail_on", "max_age", "name", "vuln_db"},
    ),
    ("pull_cmd", None, "imagekit.pull:final_pull", {"address", "as_json", "namespace", "runtime"}),
    ("pull_cmd", None, "imagekit.pull:final_pull_containerd", {"as_json", "runtime"}),
    (
        "ledger_cmd",
        "record-pod",
        "imagekit.cluster.pods:PodOptions",
        {"as_json", "ledger", "pod_json"},
    ),
    (
        "audit_cmd",
        None,
        "imagekit.audit.stage:AuditRequest",
        {
            "as_json",
            "fail_on",
            "max_age",
            "vuln_db",
            "cluster",
            "keep",
            "host_network",
            "node",
            "kubeconfig",
            "context",
            "namespace",
        },
    ),
]


_REGISTRY_OPTIONS = {"insecure", "ca_file", "registry_mirror"}


@pytest.mark.parametrize(
    ("module", "sub"),
    [
        ("build_cmd", None),
        ("pull_cmd", None),
        ("audit_cmd", None),
        ("mirror_cmd", None),
        ("inspect_cmd", None),
        ("nightly_cmd", None),
        ("plans_cmd", "bump"),
        ("pipeline_cmd", None),
        ("doctor_cmd", None),
        ("gpu_preflight_cmd", None),
    ],
)
def test_every_command_that_reaches_a_registry_takes_the_same_tls_options(
    module: str, sub: str | None
) -> None:
    """One TLS story: --insecure and --ca-file, spelt alike everywhere."""
    import importlib

    command = importlib.import_module(f"imagekit.cli.{module}").command
    if sub is not None:
        assert isinstance(command, click.Group)
        command = command.commands[sub]
    options = {param.name: param for param in command.params}
    assert _REGISTRY_OPTIONS <= set(options)
    insecure = options["insecure"]
    assert isinstance(insecure, click.Option) and insecure.multiple
    assert insecure.opts == ["--insecure"] and options["ca_file"].opts == ["--ca-file"]


def test_the_tls_options_hold_for_every_client_the_command_makes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What --insecure and --ca-file set reaches a RegistryClient made deep in a stage."""
    from imagekit.cli import inspect_cmd
    from imagekit.registry import RegistryClient

    monkeypatch.delenv("IMAGEKIT_INSECURE_REGISTRIES", raising=False)
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    seen: dict[str, object] = {}

    def fake_inspect(reference: str, platform: str | None = None) -> None:
        with RegistryClient() as client:
            tls = client._transport.tls  # noqa: SLF001 - what the stage's client got
            seen.update(insecure=tls.insecure, ca_file=tls.ca_file)
        raise SystemExit(0)

    monkeypatch.setattr(inspect_cmd, "inspect_image", fake_inspect)
    monkeypatch.setenv("IMAGEKIT_INSECURE_REGISTRIES", "env.example:5000, other.example")
    CliRunner().invoke(
        main, ["inspect", "--insecure", "reg.example:5000", "--ca-file", str(ca), "r.example/x:1"]
    )
    assert seen == {
        "insecure": frozenset({"reg.example:5000", "env.example:5000", "other.example"}),
        "ca_file": ca,
    }
    with RegistryClient() as after:  # the settings end with the command
        assert after._transport.tls.ca_file is None  # noqa: SLF001


@pytest.mark.parametrize(("module", "sub", "target", "kept"), _KEPT_BY_COMMAND)
def test_every_option_a_command_hands_on_is_taken_by_its_stage(
    module: str, sub: str | None, target: str, kept: set[str]
) -> None:
    import importlib
    import inspect

    command = importlib.import_module(f"imagekit.cli.{module}").command
    if sub is not None:
        assert isinstance(command, click.Group)
        command = command.commands[sub]
    where, _, attribute = target.partition(":")
    taken = set(inspect.signature(getattr(importlib.import_module(where), attribute)).parameters)
    options = {param.name for param in command.params if param.name is not None}
    options -= _REGISTRY_OPTIONS  # held by cli.options.registry_options for the process
    assert options - taken == kept
    assert not kept & taken, "an option kept by the command shadows a stage parameter"
