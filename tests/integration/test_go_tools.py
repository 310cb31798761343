"""scripts/lib/go-tools.sh: each tool's replace directives in the table are exactly those of
the module's own go.mod (setup copies them into the wrapper module it builds from), and a
table that names others stops the build before anything is fetched or built.

Scripts have no package, so this sits beside the other tests of the whole. It reads the
modules' go.mod files through the go command, from the module cache setup filled.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GO_TOOLS = REPO / "scripts" / "lib" / "go-tools.sh"
KYVERNO_REPLACE = (
    "k8s.io/pod-security-admission="
    "github.com/kyverno/pod-security-admission@v0.0.0-20251031094455-46f20778634f"
)


def _bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """SCRIPT run with go-tools.sh sourced (and setup's `log`), its cache under TMP_PATH."""
    path = os.environ["PATH"]
    if Path("/usr/local/go/bin/go").is_file():
        path = f"/usr/local/go/bin:{path}"
    return subprocess.run(
        ["bash", "-c", f'log() {{ echo "setup-host: $*" >&2; }}\nsource {GO_TOOLS}\n{script}'],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PATH": path, "IMAGEKIT_CACHE_DIR": str(tmp_path / "cache")},
    )


def test_every_tool_names_exactly_its_module_s_replace_directives(tmp_path: Path) -> None:
    listed = _bash(
        'for entry in "${GO_TOOLS[@]}"; do\n'
        '  read -r name module package version stamp rest <<<"$entry"\n'
        '  read -r -a replaces <<<"$rest"\n'
        '  want=$(printf "%s\\n" "${replaces[@]}" | sed "/^$/d" | LC_ALL=C sort)\n'
        '  have=$(module_replaces "$module" "$version") || exit 1\n'
        '  printf "%s|%s|%s\\n" "$name" "${want//$\'\\n\'/,}" "${have//$\'\\n\'/,}"\n'
        "done",
        tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("|")[0]: line.split("|")[1:] for line in listed.stdout.splitlines()}
    assert set(rows) == {
        "crane", "regctl", "oras", "cosign", "buildctl", "buildkitd", "docker-buildx", "kyverno",
        "policy-tester",
    }  # fmt: skip
    for name, (want, have) in rows.items():
        assert want == have, f"{name}: the table names {want!r}, its go.mod has {have!r}"
    assert rows["kyverno"] == [KYVERNO_REPLACE, KYVERNO_REPLACE]
    assert [r.split("=")[0] for r in rows["policy-tester"][1].split(",")] == [
        "github.com/golang/glog", "k8s.io/code-generator", "k8s.io/kube-openapi",
    ]  # fmt: skip
    assert all(not rows[n][1] for n in rows if n not in ("kyverno", "policy-tester"))


def test_a_table_that_misses_a_replace_directive_stops_before_building(tmp_path: Path) -> None:
    done = _bash(
        "build_go_tool kyverno github.com/kyverno/kyverno "
        "github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno v1.19.1 -",
        tmp_path,
    )
    assert done.returncode == 3, done.stderr
    assert "github.com/kyverno/kyverno v1.19.1's go.mod has the replace directives:\n" in (
        done.stderr
    )
    assert f"  {KYVERNO_REPLACE}\nsetup-host: but scripts/lib/go-tools.sh names:\n  (none)\n" in (
        done.stderr
    )
    assert "could not build kyverno v1.19.1" in done.stderr
    assert "go: downloading" not in done.stderr and "go: added" not in done.stderr
    assert [p.name for p in (tmp_path / "cache" / "go-tools").iterdir()] == ["kyverno.lock"]
