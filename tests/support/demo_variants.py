"""Variants of the demo plan that build tests write into their workspace, the package index
their pip steps use, and `imagekit build --json` run with it."""

from __future__ import annotations

import os

import yaml
from click.testing import CliRunner

from imagekit.cli.build_cmd import command as build_command
from imagekit.workspace import Workspace

# The seed's first fix: remove something, then find it missing at the assertion.
NO_NUMPY: dict[str, object] = {
    "steps": [{"kind": "remove_system_packages", "names": ["python3-numpy", "python3-av"]}],
    "assertions": {"pip_check": True, "find_spec": ["numpy"]},
}


def index_url() -> str:
    """The index pip would use anyway, passed explicitly so the secret path is exercised."""
    from pip._internal.models.index import PyPI

    return os.environ.get("PIP_INDEX_URL") or PyPI.simple_url


def build_json(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`imagekit build ARGV --json` with :func:`index_url` (and ENV): its exit code, stdout
    and stderr, for the test to assert."""
    result = CliRunner().invoke(
        build_command, [*argv, "--json"], env={"PIP_INDEX_URL": index_url(), **(env or {})}
    )
    return result.exit_code, result.stdout, result.stderr


def write_variant(workspace: Workspace, name: str, change: dict[str, object]) -> None:
    """A copy of the demo plan under a new name, with its overlay files, changed as asked."""
    data = yaml.safe_load((workspace.plans_dir / "demo.yaml").read_text())
    data.update(change, name=name)
    (workspace.plans_dir / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    target = workspace.dockerfiles_dir / name
    (target / "overlay").mkdir(parents=True, exist_ok=True)
    for item in (workspace.dockerfiles_dir / "demo" / "overlay").iterdir():
        (target / "overlay" / item.name).write_bytes(item.read_bytes())
        (target / "overlay" / item.name).chmod(item.stat().st_mode & 0o777)


def overlay_only(workspace: Workspace, name: str, change: dict[str, object] | None = None) -> str:
    """The demo plan without its pip step (and without asserting what pip installed), as
    NAME: the variant the registry builder can build with no engine build; NAME back."""
    data = yaml.safe_load((workspace.plans_dir / "demo.yaml").read_text())
    assertions = data["assertions"]
    modules = [m for m in assertions["find_spec"] if m != "six"]
    without_pip = {
        "steps": [s for s in data["steps"] if s["kind"] != "pip_install"],
        "assertions": {**assertions, "find_spec": modules},
    }
    write_variant(workspace, name, {**without_pip, **(change or {})})
    return name
