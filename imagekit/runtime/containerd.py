"""containerd, the store a Kubernetes node pulls into, reached through its own client ``ctr``.

A node's kubelet pulls through containerd's CRI plugin into the ``k8s.io`` namespace and
unpacks into a snapshotter; what the node then holds is containerd's image records, its
content store and its snapshots. This module pulls an image there and reads all three back.

Why ``ctr`` and not containerd's API: the API is gRPC with protobuf messages, and no Debian or
PyPI package ships maintained Python bindings for it; generating them would bring a protobuf
toolchain and containerd's .proto files into the project and pin us to one API revision.
``ctr`` is built from the same source as the daemon and shipped with it (Debian's containerd
package has both), so it speaks the daemon's own protocol version. Its output is read
carefully, and only where bytes cannot be had instead:

- ``ctr version``: whether a daemon answers at the address, and its version;
- ``ctr plugins ls``: the CRI plugin's status (a containerd without it cannot serve a kubelet);
- ``ctr images pull --print-chainid REF``: pulls the host platform only (as a node does),
  unpacks it into the snapshotter, and prints the platform it unpacked and the chain ID;
- ``ctr images ls``: image records. The table is cut at its header's column offsets (it is
  aligned with spaces and SIZE holds one, so splitting on whitespace would be wrong), and
  only the name, media type and target digest are taken from it;
- ``ctr content get DIGEST``: the exact bytes of an index, manifest or config, hashed here,
  so no digest is ever believed from printed text alone;
- ``ctr content ls digest==D``: a blob's labels: containerd labels the config with
  ``containerd.io/gc.ref.snapshot.<snapshotter>``, the snapshot its layers were unpacked into;
- ``ctr snapshots info KEY``: JSON, parsed strictly; the unpacked image must be Committed.

No credentials are passed: ``ctr`` takes them only on its command line, where every process
of the host can read them. A registry that needs them makes the pull fail with that said.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from imagekit import jsondoc
from imagekit.errors import (
    ContainerdError,
    ContainerdUnavailable,
    ImagekitError,
    ReferenceFormatError,
)
from imagekit.refs import Digest, Platform, parse_platform
from imagekit.registry import INDEX_TYPES, MANIFEST_TYPES, ImageConfig, select_platform
from imagekit.registry.manifest import (
    ImageIndex,
    ImageManifest,
    detect_media_type,
    parse_config,
    parse_manifest,
)

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
K8S_NAMESPACE = "k8s.io"
DEFAULT_SNAPSHOTTER = "overlayfs"
START_HINT = (
    "start containerd with its CRI plugin (as root: `containerd --config "
    "/etc/containerd/config.toml &`, or `systemctl start containerd`), or pass --address "
    "with the socket the node's kubelet uses (its --container-runtime-endpoint)"
)
CALL_TIMEOUT = 60.0
PULL_TIMEOUT = 3 * 3600.0  # a 30 GB image over a slow link
ID_RECORD_WAIT = 20.0  # the CRI plugin names a new image from an event, a moment later
_MAX_BLOB = 16 << 20  # indexes, manifests and configs; layers are never read here
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_UNPACKING = re.compile(r"^unpacking (\S+) (sha(?:256|512):[0-9a-f]+)\.\.\.$", re.MULTILINE)
_CHAIN = re.compile(r"^image chain ID: (sha256:[0-9a-f]{64})$", re.MULTILINE)
_SERVER_VERSION = re.compile(r"^Server:\s*\n\s+Version:\s+(\S+)", re.MULTILINE)
_NOT_ANSWERING = ("failed to dial", "connection refused", "context deadline exceeded")
_SNAPSHOT_LABEL = "containerd.io/gc.ref.snapshot."


@dataclass(frozen=True)
class ImageRecord:
    """One containerd image record: its name and the descriptor it points to."""

    name: str
    media_type: str
    target: Digest


@dataclass(frozen=True)
class PullOutput:
    """What ``ctr images pull`` said: the platform it unpacked, the chain ID, its whole log."""

    platform: Platform | None
    unpacked: Digest | None
    chain_id: Digest | None
    log: str


class SnapshotInfo(BaseModel):
    """``ctr snapshots info KEY`` as containerd 1.6 prints it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    Kind: str
    Name: str
    Parent: str | None = None
    Labels: dict[str, str] | None = None
    Created: str | None = None
    Updated: str | None = None


@dataclass(frozen=True)
class StoreImage:
    """One image as containerd holds it, read back blob by blob for one platform.

    ``bad_blobs`` lists the digests whose bytes from the content store did not hash to
    them (empty when the store is sound); the fields after it are read from those bytes.
    """

    record: ImageRecord
    platform: Platform
    manifest_digest: Digest
    config_digest: Digest
    config: ImageConfig
    diff_ids: tuple[Digest, ...]
    bad_blobs: tuple[str, ...]

    @property
    def is_index(self) -> bool:
        return self.record.media_type in INDEX_TYPES


def _table(text: str, what: str) -> list[dict[str, str]]:
    """Rows of a ``ctr`` table, cut at the offsets where the header's column names start."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ContainerdError(f"`ctr {what}` printed nothing, not even its header")
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        for start in starts[1:]:
            if start > len(line) or line[start - 1] != " ":
                raise ContainerdError(
                    f"`ctr {what}` printed a row that does not line up with its header: "
                    f"{line[:200]!r}",
                    hint="report it with `ctr --version`; imagekit reads containerd 1.6's tables",
                )
        cells = [
            line[start:end].strip()
            for start, end in zip(starts, [*starts[1:], len(line)], strict=True)
        ]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def parse_images(text: str) -> tuple[ImageRecord, ...]:
    """``ctr images ls``: name, media type and target digest of every record."""
    records = []
    for row in _table(text, "images ls"):
        try:
            records.append(ImageRecord(row["REF"], row["TYPE"], Digest(row["DIGEST"])))
        except (KeyError, ReferenceFormatError) as exc:
            raise ContainerdError(f"`ctr images ls` printed an unreadable row: {row}") from exc
    return tuple(records)


def parse_labels(text: str, digest: Digest) -> dict[str, str]:
    """A blob's labels from ``ctr content ls`` (tab-separated; labels are k=v,k=v)."""
    for line in text.splitlines()[1:]:
        cells = line.split("\t")
        if cells and cells[0] == digest:
            pairs = [p.partition("=") for p in cells[-1].split(",") if "=" in p]
            return {key: value for key, _, value in pairs}
    return {}


def parse_pull_log(text: str) -> PullOutput:
    """``ctr images pull --print-chainid``: the platform it unpacked, the chain ID."""
    log = _ANSI.sub("", text)
    unpacking = _UNPACKING.search(log)
    chain = _CHAIN.search(log)
    platform = None
    if unpacking is not None:
        try:
            platform = parse_platform(unpacking.group(1))
        except ReferenceFormatError:
            platform = None
    return PullOutput(
        platform=platform,
        unpacked=Digest(unpacking.group(2)) if unpacking else None,
        chain_id=Digest(chain.group(1)) if chain else None,
        log=log,
    )


def parse_server_version(text: str) -> str | None:
    """The daemon's version from ``ctr version`` (the client's comes first)."""
    match = _SERVER_VERSION.search(text)
    return match.group(1) if match else None


def parse_cri_status(text: str) -> str:
    """The CRI plugin's STATUS in ``ctr plugins ls`` (``ok``), or ``absent``."""
    for row in _table(text, "plugins ls"):
        if row.get("TYPE") == "io.containerd.grpc.v1" and row.get("ID") == "cri":
            return row.get("STATUS", "")
    return "absent"


def _socket_path(address: str) -> str:
    return address.removeprefix("unix://")


@dataclass(frozen=True)
class Containerd:
    """A containerd that answered: where, which namespace and snapshotter, which version."""

    ctr: str
    address: str
    namespace: str
    snapshotter: str
    version: str
    cri_status: str

    def run(self, *args: str, timeout: float = CALL_TIMEOUT, action: str) -> bytes:
        """Run ``ctr`` against this daemon and namespace; stdout, or a ContainerdError."""
        return _ctr(self.ctr, self.address, self.namespace, args, timeout=timeout, action=action)

    def images(self) -> tuple[ImageRecord, ...]:
        return parse_images(self.run("images", "ls", action="listing images").decode())

    def image(self, name: str) -> ImageRecord | None:
        return next((r for r in self.images() if r.name == name), None)

    def blob(self, digest: Digest) -> tuple[bytes, Digest]:
        """A blob's exact bytes from the content store, and the digest they hash to."""
        data = self.run("content", "get", str(digest), action=f"reading {digest}")
        if len(data) > _MAX_BLOB:
            raise ContainerdError(f"{digest} in containerd is over {_MAX_BLOB} bytes")
        return data, Digest.of_bytes(data)

    def labels(self, digest: Digest) -> dict[str, str]:
        """A blob's labels (``ctr content ls`` is tab-separated; labels are k=v,k=v)."""
        out = self.run("content", "ls", f"digest=={digest}", action=f"labels of {digest}")
        return parse_labels(out.decode(), digest)

    def snapshot(self, key: str) -> SnapshotInfo | None:
        """The snapshot named ``key`` in this snapshotter, or None when it does not exist."""
        try:
            out = self.run(
                "snapshots", "--snapshotter", self.snapshotter, "info", key, action="snapshot"
            )
        except ContainerdError as exc:
            if "not found" in exc.message:
                return None
            raise
        try:
            return SnapshotInfo.model_validate(jsondoc.loads(out, limit=_MAX_BLOB))
        except (ValidationError, jsondoc.JsonRefused) as exc:
            raise ContainerdError(f"`ctr snapshots info {key}` printed unreadable JSON") from exc

    def pull(self, name: str, *, plain_http: bool) -> PullOutput:
        """Pull and unpack ``name`` for the host platform, as a node's kubelet would."""
        args = ["images", "pull", "--print-chainid", "--snapshotter", self.snapshotter]
        if plain_http:
            args.append("--plain-http")
        out = self.run(*args, name, timeout=PULL_TIMEOUT, action=f"pulling {name}")
        return parse_pull_log(out.decode(errors="replace"))

    def read_image(self, record: ImageRecord, platform: Platform) -> StoreImage:
        """The record's platform manifest, config and diffIDs, from the content store."""
        bad: list[str] = []
        manifest_digest, manifest = self._platform_manifest(record, platform, bad)
        config_digest = Digest(manifest.config.digest)
        data, actual = self.blob(config_digest)
        if actual != config_digest:
            bad.append(str(config_digest))
        config = parse_config(data, registry=self._where, digest=str(config_digest))
        return StoreImage(
            record=record,
            platform=platform,
            manifest_digest=manifest_digest,
            config_digest=config_digest,
            config=config,
            diff_ids=tuple(config.rootfs.diff_ids),
            bad_blobs=tuple(bad),
        )

    @property
    def _where(self) -> str:
        return f"containerd {self.namespace}"

    def _manifest(
        self, digest: Digest, media_type: str | None, bad: list[str]
    ) -> ImageManifest | ImageIndex:
        data, actual = self.blob(digest)
        if actual != digest:
            bad.append(str(digest))
        kind = detect_media_type(data, media_type, registry=self._where, digest=str(digest))
        return parse_manifest(data, kind, registry=self._where, digest=str(digest))

    def _platform_manifest(
        self, record: ImageRecord, platform: Platform, bad: list[str]
    ) -> tuple[Digest, ImageManifest]:
        """The record's manifest for ``platform``: its target, or the index entry for it."""
        document = self._manifest(record.target, record.media_type, bad)
        if isinstance(document, ImageManifest):
            return record.target, document
        entry = select_platform(
            document, platform, where=f"{self._where} {record.name}", registry=self._where
        )
        child = self._manifest(entry.digest, entry.media_type, bad)
        if not isinstance(child, ImageManifest):
            raise ContainerdError(f"{self._where}: {entry.digest} is a nested index")
        return entry.digest, child

    def config_of(self, record: ImageRecord, platform: Platform) -> Digest | None:
        """The config digest ``record`` has on ``platform``; None when containerd cannot say.

        Records whose content is partly missing (another platform's pull, an interrupted
        one) are not images the CRI plugin can use either, so they are passed over.
        """
        if record.media_type not in INDEX_TYPES | MANIFEST_TYPES:
            return None
        try:
            _, manifest = self._platform_manifest(record, platform, [])
        except ImagekitError:
            return None
        return Digest(manifest.config.digest)

    def snapshot_label(self, config_digest: Digest) -> str | None:
        """The snapshot containerd labelled the config with for this snapshotter."""
        return self.labels(config_digest).get(_SNAPSHOT_LABEL + self.snapshotter)

    def wait_for_record(
        self, name: str, targets: Sequence[Digest], timeout: float = ID_RECORD_WAIT
    ) -> ImageRecord | None:
        """Wait for an image record ``name`` pointing at one of ``targets`` (or give up)."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((r for r in self.images() if r.name == name and r.target in targets), None)
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)


def _ctr(
    ctr: str,
    address: str,
    namespace: str,
    args: Sequence[str],
    *,
    timeout: float,
    action: str,
) -> bytes:
    argv = [ctr, "--address", address, "--connect-timeout", "10s", "--namespace", namespace]
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [*argv, *args],
            capture_output=True,
            timeout=timeout,
            check=False,
            env=_child_env(),
        )
    except subprocess.TimeoutExpired as exc:
        raise ContainerdError(f"{action} through containerd took over {timeout:.0f} s") from exc
    except OSError as exc:
        raise ContainerdUnavailable(
            f"cannot run {ctr}: {exc.strerror}", hint="install containerd (it ships ctr)"
        ) from exc
    if done.returncode != 0:
        text = _ANSI.sub("", (done.stderr or done.stdout).decode(errors="replace")).strip()
        last = text.splitlines()[-1] if text else f"ctr exited {done.returncode}"
        if any(marker in last for marker in _NOT_ANSWERING):
            raise ContainerdUnavailable(
                f"containerd at {address} does not answer: {last}", hint=START_HINT
            )
        raise ContainerdError(f"{action} failed: {last}")
    return done.stdout


def _child_env() -> dict[str, str]:
    # Flags say which daemon, namespace and snapshotter; ctr's variables must not disagree.
    drop = ("CONTAINERD_ADDRESS", "CONTAINERD_NAMESPACE", "CONTAINERD_SNAPSHOTTER")
    return {k: v for k, v in os.environ.items() if k not in drop}


def connect(
    address: str | None = None,
    *,
    namespace: str = K8S_NAMESPACE,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
) -> Containerd:
    """Check that containerd answers at ``address`` with a working CRI plugin."""
    ctr = shutil.which("ctr") or "/usr/bin/ctr"
    if not os.path.exists(ctr):
        raise ContainerdUnavailable(
            "no ctr client found (it comes with containerd)",
            hint="install containerd (Debian: `apt-get install containerd`, or docker.io)",
        )
    address = address or os.environ.get("CONTAINERD_ADDRESS") or DEFAULT_ADDRESS
    path = _socket_path(address)
    try:
        is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        raise ContainerdUnavailable(
            f"containerd does not answer at {address}: no socket there", hint=START_HINT
        )
    version_text = _ctr(ctr, address, namespace, ["version"], timeout=30, action="ctr version")
    version = parse_server_version(version_text.decode(errors="replace"))
    if version is None:
        raise ContainerdUnavailable(
            f"containerd at {address} gave no server version", hint=START_HINT
        )
    plugins = _ctr(ctr, address, namespace, ["plugins", "ls"], timeout=30, action="plugins")
    status = parse_cri_status(plugins.decode())
    if status != "ok":
        raise ContainerdUnavailable(
            f"containerd at {address} has no working CRI plugin ({status}): a kubelet could "
            "not pull through it",
            hint='enable it: take "cri" out of disabled_plugins in its config.toml and restart',
        )
    return Containerd(
        ctr=ctr,
        address=address,
        namespace=namespace,
        snapshotter=snapshotter,
        version=version,
        cri_status=status,
    )
