"""Replica bases for the seed plans, rebuilt here from real packages with the reports' defects.

The three plans the field reports are about (m3-cu13, m3-vllm, h3-spark) start from official
serving images that cannot be pulled on these machines. Each replica reproduces what the
reports found inside one of them, from real parts only:

- ``sglang-cu13`` (for m3-cu13): Debian bookworm's python3 with the real wheels nixl 1.2.0
  and nixl-cu13 1.2.0 (not nixl-cu12), moviepy 2.2.1 with pillow 12.2.0, PyAV, and the real
  CUDA 13 build of torch 2.11.0 (2.11.0+cu130, the upstream image's torch, the only x86_64
  torch build the package index has) with the NVIDIA wheels it requires, so that `pip check`
  prints exactly the report's two lines and torch's compiled arch list, read in a zero-GPU
  container, holds sm_90. About 2.7 GB of wheels, 5.5 GB installed; cached, so only a new
  machine pays for it. sglang itself is not installed: its own CUDA dependencies would add
  several GB more. (The audit's refusal of a CPU-only torch is tested on a labelled stand-in,
  tests/fixtures/audit/pkgs/torch-cpu-standin: no CPU build is on the index.)
- ``vllm`` (for m3-vllm): Debian's python3-gi, python3-software-properties and
  software-properties-common (so pygobject requires the missing pycairo), no PyAV, and
  imagekit's stand-in for the vLLM serving CLI (replica_pkgs/vllm-standin, the one stand-in
  here, said so in its own text and in the image's description label).
- ``h3`` (for h3-spark): a linux/arm64 Debian bookworm (mmdebstrap under qemu-user-static)
  with the real vllm-omni 0.30.0 wheel installed without its dependencies, so the module the
  H3 report patches, vllm_omni/diffusion/models/minimax_h3/minimax_h3_transformer.py, is the
  original under /usr/local/lib/python3.11/dist-packages. Published as upstream publishes: an
  image index with the arm64 image and an attestation-style unknown/unknown entry.

Wheels are fetched by the host's pip (``pip download``, which reaches the package index
through the host's own configuration); the pip inside a rootfs installs
them with ``--no-index --no-deps``, so the set installed is exactly the set downloaded. Each
piece (wheel folder, rootfs tarball, OCI layout) is cached under the shared imagekit cache,
keyed by its inputs and built under a per-replica lock, like the base image fixture. A
replica is pushed with ``skopeo copy --all --preserve-digests`` from its OCI layout, so it
has the same digest in every registry it is pushed to on this machine.

``python -m tests.support.replicas build|push NAME ...`` (scripts/seeds.sh uses it): a
download that fails exits 3 naming the package.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.base_image import cache_dir, locked, mmdebstrap_version
from tests.support.media_types import OCI_GZIP
from tests.support.oci_layout import LayoutWriter, skopeo_copy
from tests.support.registries import start_registry

SUITE = "bookworm"
PYTHON_VERSION = "3.11"  # bookworm's python3
# Bumped when the way a replica is made changes, so old cache entries are not reused.
BUILDER_VERSION = 1
CREATED = "2026-12-01T00:00:00Z"  # fixed, so a rebuilt layout from the same rootfs is the same
PACKAGES_DIR = Path(__file__).resolve().parent / "replica_pkgs"
SITE = "/usr/local/lib/python3.11/dist-packages"
H3_MODULE = f"{SITE}/vllm_omni/diffusion/models/minimax_h3/minimax_h3_transformer.py"


class ReplicaError(Exception):
    """A replica that could not be made; ``package`` names what could not be fetched."""

    def __init__(self, message: str, package: str | None = None) -> None:
        super().__init__(message)
        self.package = package


@dataclass(frozen=True)
class Replica:
    """What one replica is made of; every field is an input of its cache key."""

    name: str
    upstream: str  # the image it replicates, as the report names it
    description: str  # also the image's org.opencontainers.image.description label
    arch: str = "amd64"  # Debian's name for it
    packages: tuple[str, ...] = ("python3", "python3-pip")
    resolve: tuple[str, ...] = ()  # downloaded with their dependencies
    exact: tuple[str, ...] = ()  # downloaded without dependencies; replace resolve's versions
    standins: tuple[str, ...] = ()  # projects under replica_pkgs/ built into wheels here
    compile_bytecode: bool = True
    index: bool = False  # publish as an image index with an attestation entry
    # Install with pip run from its wheel instead of Debian's python3-pip: under qemu,
    # python3-pip's dependencies cost minutes of dpkg and pip check is not wanted there.
    pip_from_wheel: str | None = None

    @property
    def repository(self) -> str:
        return f"imagekit-seeds/{self.name}"

    @property
    def platform(self) -> str:
        return f"linux/{self.arch}"


_SGLANG_EXACT = ("nixl==1.2.0", "pillow==12.2.0")
_SGLANG_RESOLVE = ("nixl-cu13==1.2.0", "moviepy==2.2.1", "av==16.1.0")
_SGLANG_TEXT = (
    "imagekit seed replica of {upstream} as the MiniMax-M3 report found it: nixl 1.2.0 and "
    "nixl-cu13 1.2.0 without nixl-cu12, moviepy 2.2.1 with pillow 12.2.0, PyAV 16.1.0, and "
    "{torch}. Real wheels from the package index on Debian bookworm's python3; sglang itself "
    "is not installed (its wheel pulls several GB of CUDA dependencies)."
)
SGLANG_UPSTREAM = "docker.io/lmsysorg/sglang:dev-cu13-minimax-m3"

REPLICAS: dict[str, Replica] = {
    r.name: r
    for r in (
        Replica(
            name="sglang-cu13",
            upstream=SGLANG_UPSTREAM,
            description=_SGLANG_TEXT.format(
                upstream=SGLANG_UPSTREAM,
                torch="the real CUDA 13 build of torch 2.11.0 (2.11.0+cu130, the torch of the "
                "upstream image) with the NVIDIA wheels it requires",
            ),
            resolve=("torch==2.11.0", *_SGLANG_RESOLVE),
            exact=_SGLANG_EXACT,
        ),
        Replica(
            name="vllm",
            upstream="docker.io/vllm/vllm-openai:minimax-m3",
            description=(
                "imagekit seed replica of docker.io/vllm/vllm-openai:minimax-m3 as the "
                "MiniMax-M3 report found it: Debian's python3-gi, python3-software-properties "
                "and software-properties-common installed (pygobject without pycairo), no "
                "PyAV, numpy 2.4.6. The `vllm` serving CLI in it is a STAND-IN written by "
                "imagekit (the real vllm wheel drags several GB of CUDA torch): it fails with "
                "'Failed to infer device type' without a GPU, parses its arguments with "
                "CpuPlatform, prints grouped help for --help and every flag for --help=all, "
                "and requires numpy as the real wheel does."
            ),
            packages=(
                "python3",
                "python3-pip",
                "python3-gi",
                "python3-software-properties",
                "software-properties-common",
            ),
            resolve=("numpy==2.4.6",),  # the real vllm wheel requires numpy
            standins=("vllm-standin",),
        ),
        Replica(
            name="h3",
            upstream="docker.io/vllm/vllm-omni:minimax-h3",
            description=(
                "imagekit seed replica of docker.io/vllm/vllm-omni:minimax-h3 (linux/arm64): "
                "Debian bookworm arm64 with the real vllm-omni 0.30.0 wheel installed without "
                "its dependencies, so the module the H3 report patches is the original "
                f"({H3_MODULE}). Nothing of vllm-omni runs here: its dependencies "
                "(torch, diffusers, ...) are not installed."
            ),
            arch="arm64",
            packages=("python3",),
            exact=("vllm-omni==0.30.0",),
            pip_from_wheel="pip==24.3.1",
            compile_bytecode=False,  # 1,700 files compiled under qemu cost minutes
            index=True,
        ),
    )
}


def _tree_digest(folder: Path) -> str:
    """sha256 over a folder's files (relative names and bytes), for the cache key."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts or path.suffix == ".pyc" or ".egg-info" in str(path):
            continue
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(replica: Replica) -> str:
    """A hash of everything that decides the replica (not the day's index or mirror)."""
    inputs = {
        "builder": BUILDER_VERSION,
        "suite": SUITE,
        "python": PYTHON_VERSION,
        "replica": dict(replica.__dict__),
        "standins": {n: _tree_digest(PACKAGES_DIR / n) for n in replica.standins},
        "install": _install_script(replica),
        "mmdebstrap": mmdebstrap_version(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _replica_dir() -> Path:
    path = cache_dir() / "replicas"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _made_in_place(target: Path, prefix: str) -> Iterator[Path]:
    """A new folder beside TARGET to make it in: when the block ends well it replaces TARGET
    whole (a reader never meets half of one), when it fails it is removed."""
    partial = Path(tempfile.mkdtemp(prefix=prefix, dir=_replica_dir()))
    try:
        yield partial
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _platform_args(arch: str) -> list[str]:
    """pip's --platform tags a bookworm rootfs (glibc 2.36) of this architecture accepts."""
    machine = {"amd64": "x86_64", "arm64": "aarch64"}[arch]
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(36, 16, -1)]
    tags += [f"manylinux2014_{machine}"]
    return [arg for tag in tags for arg in ("--platform", tag)]


_UNSATISFIED = re.compile(r"satisfies the requirement (\S+)")


def _pip_download(replica: Replica, requirements: Sequence[str], dest: Path, deps: bool) -> None:
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
        *_platform_args(replica.arch), "--dest", str(dest),
        *([] if deps else ["--no-deps"]), *requirements,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return
    named = _UNSATISFIED.search(done.stderr)
    package = named.group(1) if named else " ".join(requirements)
    last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()), "pip failed")
    raise ReplicaError(
        f"replica {replica.name}: could not download {package} from the package index: "
        f"{last.strip()}",
        package=package,
    )


def _wheel_name(path: Path) -> tuple[str, str]:
    """(canonical distribution name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return re.sub(r"[-_.]+", "-", name).lower(), version


def wheelhouse(replica: Replica) -> Path:
    """The replica's wheels: resolved, exact and stand-in ones, one version a distribution."""
    target = _replica_dir() / f"{replica.name}-{cache_key(replica)}.wheels"
    if target.is_dir():
        return target
    with _made_in_place(target, f"{replica.name}-wheels-") as partial:
        if replica.resolve:
            _pip_download(replica, replica.resolve, partial, deps=True)
        exact_dir = partial / "exact"
        exact_dir.mkdir()
        if replica.exact:
            _pip_download(replica, replica.exact, exact_dir, deps=False)
        for project in replica.standins:
            # Built from a copy: an in-tree build would leave build/ and egg-info behind.
            source = partial / "src" / project
            shutil.copytree(PACKAGES_DIR / project, source)
            _build_wheel(source, exact_dir)
            shutil.rmtree(partial / "src")
        # An exact pin replaces whatever version the resolver chose for that distribution
        # (pillow 12.2.0 over the 11.x moviepy's requirement resolves to).
        pinned = {_wheel_name(w)[0] for w in exact_dir.glob("*.whl")}
        for wheel in partial.glob("*.whl"):
            if _wheel_name(wheel)[0] in pinned:
                wheel.unlink()
        for wheel in exact_dir.glob("*.whl"):
            wheel.rename(partial / wheel.name)
        exact_dir.rmdir()
        if replica.pip_from_wheel:
            _pip_download(replica, [replica.pip_from_wheel], partial / "tool", deps=False)
    return target


def _build_wheel(source: Path, dest: Path) -> Path:
    """A stand-in project's wheel, built from a copy (an in-tree build leaves build/ and
    egg-info behind); the one wheel written to ``dest``."""
    before = set(dest.glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--disable-pip-version-check", "--wheel-dir", str(dest), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    (made,) = set(dest.glob("*.whl")) - before
    return made


STANDIN_VARIANT_VERSION = "0.0.0+imagekit.standin.olderbench"


def vllm_standin_variant(dest: Path, without: Sequence[str]) -> Path:
    """A wheel of the vllm stand-in whose `vllm bench serve` lacks the flags ``without``, as an
    older benchmark client would; its own version, so it installs over the replica's with a
    RECORD of its own (the audit sees a consistent install lacking the flags, nothing else)."""
    with tempfile.TemporaryDirectory(prefix="vllm-standin-variant-") as tmp:
        source = Path(tmp) / "vllm-standin"
        shutil.copytree(PACKAGES_DIR / "vllm-standin", source)
        (source / "vllm" / "_standin_variant.py").write_text(
            f'"""STAND-IN variant: an older benchmark client (not vLLM)."""\n\n'
            f"WITHOUT_BENCH_FLAGS = {tuple(without)!r}\n"
        )
        project = source / "pyproject.toml"
        text = project.read_text()
        project.write_text(
            text.replace(
                'version = "0.0.0+imagekit.standin"', f'version = "{STANDIN_VARIANT_VERSION}"'
            )
        )
        dest.mkdir(parents=True, exist_ok=True)
        return _build_wheel(source, dest)


def _install_script(replica: Replica) -> str:
    compile_flag = "" if replica.compile_bytecode else " --no-compile"
    # pip runs from its own wheel where the rootfs has no pip (https://pip.pypa.io/en/stable/
    # installation/: "python pip.whl/pip install ..."); that pip is not installed.
    find_pip, pip = "", "python3 -m pip"
    if replica.pip_from_wheel:
        # A glob cannot reach through the wheel file to its pip/ folder: name the wheel first.
        find_pip, pip = "set -- /tmp/imagekit-wheels/tool/pip-*.whl\n", 'python3 "$1/pip"'
    return (
        "set -eu\n"
        f"{find_pip}{pip} install --no-index --no-deps --no-cache-dir --break-system-packages "
        f"--disable-pip-version-check --root-user-action=ignore{compile_flag} "
        "/tmp/imagekit-wheels/*.whl\n"
    )


def rootfs(replica: Replica) -> Path:
    """The replica's root filesystem as a tarball (mmdebstrap), cached by its inputs."""
    key = cache_key(replica)
    target = _replica_dir() / f"{replica.name}-{key}.tar"
    if target.exists():
        return target
    wheels = wheelhouse(replica)
    with tempfile.TemporaryDirectory(prefix=f"{replica.name}-stage-", dir=_replica_dir()) as tmp:
        stage = Path(tmp) / "wheels"
        shutil.copytree(wheels, stage)
        (stage / "install.sh").write_text(_install_script(replica))
        partial = target.with_suffix(".partial.tar")
        partial.unlink(missing_ok=True)
        env_clean = "env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8"
        hooks = [
            'mkdir -p "$1/tmp/imagekit-wheels"',
            f"sync-in {stage} /tmp/imagekit-wheels",
            f'{env_clean} chroot "$1" sh /tmp/imagekit-wheels/install.sh',
            # Keep the replica small: no wheels, apt lists, docs or man pages left behind.
            'rm -rf "$1/tmp/imagekit-wheels" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* '
            '"$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/*',
        ]
        command = [
            "mmdebstrap", "--quiet", "--variant=apt", f"--arch={replica.arch}",
            "--include=" + ",".join(replica.packages),
            *(f"--customize-hook={hook}" for hook in hooks), SUITE, str(partial),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise ReplicaError(f"replica {replica.name}: mmdebstrap failed:\n{tail}")
        partial.rename(target)
    return target


class _HashingWriter:
    """A file object that hashes what is written through it."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return int(self.fh.write(data))

    def flush(self) -> None:
        self.fh.flush()


@dataclass(frozen=True)
class LayoutInfo:
    path: Path
    tag: str
    digest: str  # what the registry will name the pushed top-level manifest or index
    media_type: str
    image_manifest: str  # the platform image's manifest digest
    config_digest: str
    diff_id: str


def _gzip_layer(tarball: Path, blobs: Path) -> tuple[str, str, int]:
    """Stream the tarball into a gzip blob (isal, mtime 0): (digest, diffID, size)."""
    import isal.igzip

    tmp = blobs / "layer.partial"
    diff = hashlib.sha256()
    with tmp.open("wb") as raw:
        writer = _HashingWriter(raw)
        with isal.igzip.IGzipFile(fileobj=writer, mode="wb", compresslevel=2, mtime=0) as gz:  # type: ignore[no-untyped-call]
            with tarball.open("rb") as src:
                while chunk := src.read(1 << 20):
                    diff.update(chunk)
                    gz.write(chunk)  # type: ignore[no-untyped-call]
    digest = writer.hash.hexdigest()
    tmp.rename(blobs / digest)
    return f"sha256:{digest}", f"sha256:{diff.hexdigest()}", writer.size


def layout(replica: Replica) -> LayoutInfo:
    """The replica as an OCI image layout (one gzip layer, its config), cached by its inputs."""
    key = cache_key(replica)
    target = _replica_dir() / f"{replica.name}-{key}.layout"
    info_path = target / "imagekit-replica.json"
    if info_path.exists():
        data = json.loads(info_path.read_text())
        return LayoutInfo(path=target, **data)
    tarball = rootfs(replica)
    with _made_in_place(target, f"{replica.name}-layout-") as partial:
        writer = LayoutWriter(partial)
        layer_digest, diff_id, size = _gzip_layer(tarball, partial / "blobs" / "sha256")
        fields: dict[str, Any] = {"os": "linux", "architecture": replica.arch}
        if replica.arch == "arm64":
            fields["variant"] = "v8"
        config = {
            **fields,
            "created": CREATED,
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "Cmd": ["python3"],
                "Labels": {
                    "org.opencontainers.image.title": f"imagekit seed replica {replica.name}",
                    "org.opencontainers.image.description": replica.description,
                    "io.imagekit.replica.of": replica.upstream,
                },
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [
                {
                    "created": CREATED,
                    "created_by": f"mmdebstrap {SUITE} ({replica.arch}) + pip install "
                    "--no-index --no-deps of the replica's wheels (tests/support/replicas.py)",
                    "comment": replica.description,
                }
            ],
        }
        config_bytes = json.dumps(config, sort_keys=True).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **writer.blob(config_bytes),
            },
            "layers": [{"mediaType": OCI_GZIP, "digest": layer_digest, "size": size}],
        }
        image = {
            "mediaType": manifest["mediaType"],
            **writer.blob(json.dumps(manifest, sort_keys=True).encode()),
        }
        tag = f"{replica.name}-{key}"
        if replica.index:
            entry = {**image, "platform": fields}
            top = writer.index([entry, writer.attestation(entry)], tag)
        else:
            top = writer.index([image], tag)
        data = {
            "tag": tag,
            "digest": top["digest"],
            "media_type": top["mediaType"],
            "image_manifest": image["digest"],
            "config_digest": "sha256:" + hashlib.sha256(config_bytes).hexdigest(),
            "diff_id": diff_id,
        }
        (partial / "imagekit-replica.json").write_text(json.dumps(data, sort_keys=True))
    return LayoutInfo(path=target, **data)


def build(name: str) -> LayoutInfo:
    """Make (or find in the cache) the named replica's layout; one builder at a time."""
    replica = REPLICAS[name]
    with locked(_replica_dir() / f"{name}.lock"):
        return layout(replica)


#: The replicas the seed plans run on.
SEED_REPLICAS = ("sglang-cu13", "vllm", "h3")


def build_all(names: Sequence[str] = SEED_REPLICAS) -> list[LayoutInfo]:
    """Make the named replicas side by side (mostly downloads and dpkg); cached ones return
    at once. The first ReplicaError is raised after every build has ended."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(names)) as pool:
        return list(pool.map(build, names))


@dataclass(frozen=True)
class PublishedReplica:
    name: str
    reference: str  # HOST/REPO@sha256:... as a plan's --base takes it
    digest: str
    platform: str
    image_manifest: str
    config_digest: str
    registry_host: str
    repository: str
    tag: str
    description: str = field(repr=False, default="")

    def to_json(self) -> dict[str, str]:
        return dict(self.__dict__)


def push(name: str, registry_host: str) -> PublishedReplica:
    """Push the replica (whole index, digests preserved) and return it pinned by digest."""
    replica = REPLICAS[name]
    info = build(name)
    dest = f"{registry_host}/{replica.repository}:{info.tag}"
    skopeo_copy(f"oci:{info.path}:{info.tag}", f"docker://{dest}", "--all", "--preserve-digests")
    return published(name, registry_host)


def published(name: str, registry_host: str) -> PublishedReplica:
    """The replica as a registry at ``registry_host`` that holds it (pushed by ``push``, or
    serving ``registry_store``) names it, pinned by digest."""
    replica = REPLICAS[name]
    info = build(name)
    return PublishedReplica(
        name=name,
        reference=f"{registry_host}/{replica.repository}@{info.digest}",
        digest=info.digest,
        platform=replica.platform,
        image_manifest=info.image_manifest,
        config_digest=info.config_digest,
        registry_host=registry_host,
        repository=replica.repository,
        tag=info.tag,
        description=replica.description,
    )


STORE_VERSION = 1  # bumped when the way a store is filled changes


def registry_store(names: Sequence[str] = SEED_REPLICAS) -> Path:
    """A registry's storage folder holding the named replicas, as ``push`` leaves them, made
    once by its inputs (every replica's cache key) and cached beside their layouts.

    Pushing the CUDA replica costs a session close to a minute (2.7 GB through a registry that
    hashes and writes it); a registry started read-only on this folder (``storage_of``)
    serves the same manifests and blobs at once. It is filled by pushing into a real registry
    on it; the pushed layer blobs are then hard links to the layouts' own (the same bytes,
    named by their digest), so the store costs no second copy on the disk."""
    infos = build_all(names)
    inputs = json.dumps([STORE_VERSION, *(info.tag for info in infos)])
    key = hashlib.sha256(inputs.encode()).hexdigest()[:16]
    target = _replica_dir() / f"registry-{key}"
    marker = target / "imagekit-store.json"
    with locked(_replica_dir() / "registry-store.lock"):
        if marker.exists():
            return target
        with _made_in_place(target, "registry-store-") as partial:
            registry = start_registry(partial / "registry", storage_of=partial)
            try:
                for name in names:
                    push(name, registry.host)
            finally:
                registry.stop()
                shutil.rmtree(partial / "registry")
            for info in infos:
                _link_blobs(info.path, partial)
            (partial / "imagekit-store.json").write_text(
                json.dumps({"replicas": [i.tag for i in infos]})
            )
    return target


def _link_blobs(layout_path: Path, store: Path) -> None:
    """Each blob the store holds that the layout holds too becomes a hard link to the
    layout's file (distribution names a blob's file by its digest: the same bytes)."""
    blobs = store / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256"
    for source in (layout_path / "blobs" / "sha256").iterdir():
        stored = blobs / source.name[:2] / source.name / "data"
        if not stored.exists() or stored.stat().st_size < (1 << 20):
            continue
        linked = stored.with_name("data.link")
        os.link(source, linked)
        linked.replace(stored)


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.support.replicas build NAME... | push NAME... --registry HOST`."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.replicas")
    parser.add_argument("action", choices=("build", "push", "list"))
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument("--registry", metavar="HOST:PORT", help="where push puts them")
    args = parser.parse_args(argv)
    if args.action == "list":
        for replica in REPLICAS.values():
            print(f"{replica.name:<18} {replica.platform:<12} {replica.upstream}")
        return 0
    unknown = [n for n in args.names if n not in REPLICAS]
    if unknown or not args.names:
        print(
            f"replicas: name one or more of {', '.join(REPLICAS)} (got {unknown or 'none'})",
            file=sys.stderr,
        )
        return 2
    if args.action == "push" and not args.registry:
        print("replicas: push needs --registry HOST:PORT", file=sys.stderr)
        return 2
    try:
        for name in args.names:
            if args.action == "build":
                info = build(name)
                print(json.dumps({"name": name, "layout": str(info.path), "digest": info.digest}))
            else:
                print(json.dumps(push(name, args.registry).to_json()))
    except ReplicaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except (subprocess.CalledProcessError, AssertionError, OSError) as exc:
        print(f"error: replica could not be made: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
