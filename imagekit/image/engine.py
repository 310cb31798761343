"""An image in the engine's store (go-containerregistry's ``daemon``), read through
`docker save`.

The engine sends an image only whole: `docker save` streams one tar holding every layer
(``ID/layer.tar`` up to Docker 24, ``blobs/sha256/HEX`` in the OCI layout Docker 25 writes)
and ``manifest.json`` naming them in order, last. So an engine image has no random access:
every layer streams past once, the asked ones are scanned and every one is checked against
the diffID the engine's own inspect names (a layer that `docker save` writes twice is sent
once and linked). It is the part of an image a comparison reads
(:class:`~imagekit.image.interface.LayerSource`): the engine keeps no registry manifest of an
image it built or imported, so there is none to hand out.
"""

from __future__ import annotations

import posixpath
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from imagekit import jsondoc
from imagekit.errors import CheckFailed, DigestMismatch, EngineUnavailable
from imagekit.image.members import LayerScan, scan_layer
from imagekit.refs import Digest
from imagekit.runtime.engine import Engine, engine_errors

#: The most bytes of ``manifest.json`` read from `docker save`.
_MAX_MANIFEST = 4 << 20


@dataclass(frozen=True)
class SavedImage:
    """An image in the local engine, streamed once through `docker save` (no random access).

    ``docker save`` cannot send one layer alone, so every layer streams past; only the asked
    ones are kept, the others are hashed and checked against their diffID all the same.
    """

    engine: Engine
    image: str
    label: str
    random_access: bool = False

    def diff_ids(self) -> Sequence[Digest]:
        with engine_errors(f"inspecting {self.image}"):
            inspected = self.engine.client.image.inspect(self.image)
        return [Digest(str(d)) for d in inspected.root_fs.layers or ()]

    @staticmethod
    def _read(
        stdout: IO[bytes],
        scans_by_member: dict[str, LayerScan],
        links: dict[str, str],
        manifests: list[object],
    ) -> None:
        """The saved tar read as it streams: each layer scanned, each link and the manifest
        kept."""
        with tarfile.open(fileobj=stdout, mode="r|") as outer:
            for member in outer:
                if member.issym():
                    # `docker save` writes a layer that occurs twice (same diffID) once and
                    # links the second path to it.
                    links[member.name] = posixpath.normpath(
                        posixpath.join(posixpath.dirname(member.name), member.linkname)
                    )
                    continue
                content = outer.extractfile(member) if member.isreg() else None
                if content is None:
                    continue
                if member.name == "manifest.json":
                    manifests.append(
                        jsondoc.loads(content.read(_MAX_MANIFEST), limit=_MAX_MANIFEST)
                    )
                elif member.name.endswith("/layer.tar") or member.name.startswith("blobs/"):
                    try:
                        scans_by_member[member.name] = scan_layer(content)
                    except CheckFailed:
                        continue  # an OCI blob that is a config or manifest, not a layer

    def scan(self, indices: Sequence[int]) -> dict[int, LayerScan]:
        declared = list(self.diff_ids())
        wanted = set(indices)
        scans_by_member: dict[str, LayerScan] = {}
        links: dict[str, str] = {}
        manifests: list[object] = []
        # The client's own command (its host and TLS options), its stdout read as the tar
        # streams: python-on-whales' stream reads lines and leaves its pipes open.
        command = [*self.engine.client.client_config.docker_cmd, "save", self.image]
        pipe = subprocess.PIPE
        with subprocess.Popen(command, stdout=pipe, stderr=pipe) as child:  # noqa: S603
            assert child.stdout is not None and child.stderr is not None  # noqa: S101 - PIPE
            unread: str | None = None
            try:
                self._read(child.stdout, scans_by_member, links, manifests)
            except tarfile.TarError as exc:
                unread = str(exc)
            # tarfile stops at the end-of-archive blocks; the padding after them is read too,
            # so that the child ends
            while child.stdout.read(1 << 20):
                pass
            said = child.stderr.read(_MAX_MANIFEST).decode("utf-8", "replace").strip()
        if child.returncode != 0 or unread is not None:
            why = f"exit {child.returncode}: {said}" if child.returncode else f"not a tar: {unread}"
            raise EngineUnavailable(f"`docker save {self.image}` failed ({why})")
        manifest = manifests[0] if manifests else None
        layer_names = _layer_names(manifest, self.image)
        if len(layer_names) != len(declared):
            raise CheckFailed(
                f"`docker save {self.image}` sent {len(layer_names)} layers, "
                f"its config names {len(declared)}"
            )
        result: dict[int, LayerScan] = {}
        for index, name in enumerate(layer_names):
            layer_scan = scans_by_member.get(links.get(name, name))
            if layer_scan is None:
                raise CheckFailed(f"`docker save {self.image}` did not send layer {name}")
            if layer_scan.diff_id != declared[index]:
                raise DigestMismatch(
                    f"layer {index} of {self.image} as saved does not match its diffID",
                    expected=str(declared[index]),
                    actual=str(layer_scan.diff_id),
                )
            if index in wanted:
                result[index] = layer_scan
        return result


def _layer_names(manifest: object, image: str) -> list[str]:
    """The layers ``manifest.json`` names, in order, for the one image saved."""
    first = manifest[0] if isinstance(manifest, list) and manifest else None
    names = first.get("Layers") if isinstance(first, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise EngineUnavailable(f"`docker save {image}` sent no manifest.json naming its layers")
    return [str(n) for n in names]
