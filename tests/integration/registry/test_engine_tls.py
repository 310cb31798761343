"""What the engine pulls itself, from a registry with its own CA, trusted through certs.d.

The real registry serves TLS with a CA the tests make, on a loopback name the engine verifies
(tests/support/engine_tls.py says why neither localhost nor 127.0.0.1 would do). The CA goes
into the engine's own /etc/docker/certs.d/HOST:PORT/ca.crt, which imagekit's client reads by
default too ($IMAGEKIT_CERTS_D is unset here, so both read the same folder), and is removed
after each test. The three pulls the engine makes for imagekit (an engine build's base,
`imagekit pull`, the image an audit runs, the pushed image the registry builder's assertions
run in) each go through it; without it, each ends in one line naming the registry and what to
do, exit 3. The engine reads the folder on each pull:
the CA is put there between two pulls of one test, with no restart, and the second works.
"""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from imagekit.builders.push import push_image
from imagekit.errors import RegistryTLSError
from imagekit.ledger import read_records
from imagekit.runtime.engine import ENGINE_CERTS_D, Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.cli import without_tls_settings
from tests.support.demo_variants import overlay_only
from tests.support.engine_tls import SECURE_LOOPBACK, engine_trusts, hosts_entry, new_name
from tests.support.gotools import run_tool
from tests.support.registries import MakeRegistry, RunningRegistry
from tests.support.tls import ServerCertificate, make_server_certificate

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class SecureRegistry:
    registry: RunningRegistry
    cert: ServerCertificate

    @property
    def host(self) -> str:
        return self.registry.host


@pytest.fixture(scope="module")
def secure(
    make_registry: MakeRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureRegistry]:
    with hosts_entry(new_name()) as name:
        cert = make_server_certificate(tmp_path_factory.mktemp("engine-tls"), hosts=(name,))
        registry = make_registry(tls=cert, address=SECURE_LOOPBACK, name=name)
        yield SecureRegistry(registry, cert)


def _docker(engine: Engine, *args: str, check: bool = True) -> str:
    return subprocess.run(
        [engine.client_path, *args], capture_output=True, text=True, check=check
    ).stdout.strip()


def _forget(engine: Engine, host: str) -> None:
    """Remove every name of ``host`` from the engine, so that the next use pulls again (the
    images themselves stay under their other names)."""
    listed = _docker(engine, "image", "ls", "--digests", "--format",
                     "{{.Repository}} {{.Tag}} {{.Digest}}")  # fmt: skip
    for line in listed.splitlines():
        repo, tag, digest = line.split(" ")
        if repo.startswith(f"{host}/"):
            name = f"{repo}:{tag}" if tag != "<none>" else f"{repo}@{digest}"
            _docker(engine, "rmi", name, check=False)


@pytest.fixture(scope="module")
def base_there(engine: Engine, base_image: BaseImage, secure: SecureRegistry) -> Iterator[str]:
    """The test base in the secure registry: HOST/REPO@DIGEST.

    Copied there blob for blob by crane from the session's registry, which holds it already
    (an engine push would compress its 700 MB again, about 25 s); the manifest's bytes, so
    its digest, are the same. The engine's own push is tested below on its own."""
    remote = f"{secure.host}/imagekit-test/base:tls"
    copied = run_tool(
        "crane", "copy", "--insecure", base_image.reference, remote,
        env={"SSL_CERT_FILE": str(secure.cert.ca_path)}, timeout=300,
    )  # fmt: skip
    assert copied.returncode == 0, copied.stderr
    _forget(engine, secure.host)
    yield f"{secure.host}/imagekit-test/base@{base_image.digest}"
    _forget(engine, secure.host)


@pytest.fixture
def forget_after(engine: Engine, secure: SecureRegistry) -> Iterator[None]:
    _forget(engine, secure.host)
    yield
    _forget(engine, secure.host)


def _imagekit(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it; both it and the engine read /etc/docker/certs.d."""
    return without_tls_settings(*args, timeout=500)


def _engine_tls_line(done: subprocess.CompletedProcess[str], host: str) -> None:
    """Exit 3 and exactly: the engine's failure naming the registry, then what to do."""
    assert done.returncode == 3, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.strip().splitlines() if not ln.startswith("imagekit: ")]
    error, hint = lines[-2:]
    assert error == (
        f"error: {host}: the Docker engine could not verify the TLS certificate of {host} "
        "(x509: certificate signed by unknown authority)"
    ), done.stderr[-3000:]
    assert f"{ENGINE_CERTS_D}/{host}/ca.crt" in hint and "insecure-registries" in hint
    assert "Traceback" not in done.stderr


def _refused_then_trusted(
    secure: SecureRegistry, refused_argv: tuple[str, ...], trusted_argv: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    """The CLI run twice, as each pull test starts: first with only imagekit's client given
    the CA (the engine's refusal is asserted, one line and exit 3), then with the CA in the
    engine's certs.d and no restart; the second run, for the test's own assertions."""
    _engine_tls_line(_imagekit(*refused_argv), secure.host)
    with engine_trusts(secure.host, secure.cert.ca_path):
        return _imagekit(*trusted_argv)


@pytest.mark.usefixtures("forget_after", "workspace")
def test_imagekit_pull_goes_through_certs_d_and_the_engine_reads_it_on_each_pull(
    engine: Engine, secure: SecureRegistry, base_there: str
) -> None:
    # imagekit's own client is given the CA (--ca-file), the engine is not: the engine's
    # failure is the one said. No restart: the engine reads the folder on the second pull;
    # imagekit reads the same one.
    done = _refused_then_trusted(
        secure,
        ("pull", "--ca-file", str(secure.cert.ca_path), base_there),
        ("pull", "--json", base_there),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["ok"] is True, doc
    assert base_there in _docker(engine, "image", "inspect", "--format",
                                 "{{json .RepoDigests}}", base_there)  # fmt: skip


@pytest.mark.usefixtures("forget_after", "workspace")
def test_an_audit_pulls_its_image_through_certs_d(secure: SecureRegistry, base_there: str) -> None:
    done = _refused_then_trusted(
        secure,
        ("audit", "--ca-file", str(secure.cert.ca_path), "--offline", base_there),
        ("audit", "--offline", "--json", base_there),
    )
    # The bare base is no complete image (exit 1, a verdict); what matters is that it was
    # pulled from the secure registry and audited, not that nothing could be finished.
    assert done.returncode in (0, 1), done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["image"]["pulled"] is True, doc["image"]
    assert doc["image"]["requested"] == base_there


@pytest.mark.usefixtures("forget_after", "workspace")
def test_an_engine_build_pulls_its_base_through_certs_d(
    engine: Engine, secure: SecureRegistry, base_there: str, created_refs: list[str]
) -> None:
    assert engine.has_buildx, "the engine path's buildx docker driver is what is tested here"
    tag = "imagekit-test/tls-base:build"
    created_refs.append(tag)
    argv = ("build", "demo", "--builder", "engine", "--base", base_there, "--tag", tag)
    done = _refused_then_trusted(
        secure, (*argv, "--ca-file", str(secure.cert.ca_path)), (*argv, "--json")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["base"] == base_there
    log = Path(doc["log"]).read_text()
    assert f"imagekit: pulling the base {base_there}" in log
    assert "using docker driver" in log
    assert _docker(engine, "image", "inspect", "--format", "{{.Id}}", tag) == doc["image_id"]


def _tags(secure: SecureRegistry, repository: str) -> list[str]:
    """The repository's tags, read over TLS with the test's CA (none yet: an empty list)."""
    url = f"https://{secure.host}/v2/{repository}/tags/list"
    trust = ssl.create_default_context(cafile=str(secure.cert.ca_path))
    answer = httpx.get(url, verify=trust, timeout=30)
    if answer.status_code == 404:
        return []
    answer.raise_for_status()
    return list(answer.json().get("tags") or [])


def test_the_registry_builder_runs_its_assertions_only_where_the_engine_trusts_the_registry(
    engine: Engine,
    secure: SecureRegistry,
    base_there: str,
    forget_after: None,
    workspace: Workspace,
) -> None:
    """The registry builder pushes by digest, then the engine pulls that digest to run the
    plan's assertions. imagekit's own client has the CA (--ca-file) in both runs; only the
    engine's certs.d differs, so the refusal is the engine's and nothing is called a pass."""
    # The demo plan's pip step needs an engine build; its overlay-only variant does not.
    name = overlay_only(workspace, "demo-tls-assembled")
    repository = "imagekit-test/tls-assembled"
    argv = (
        "build", name, "--builder", "registry", "--base", base_there,
        "--push", f"{secure.host}/{repository}", "--ca-file", str(secure.cert.ca_path),
    )  # fmt: skip
    refused = _imagekit(*argv, "--tag", "refused")
    _engine_tls_line(refused, secure.host)
    assert "assertions: pulling" in refused.stderr  # it got as far as the assertions
    # Pushed by digest only: no tag put, no record (a pass least of all), no verdict claimed.
    assert _tags(secure, repository) == []
    assert not workspace.ledger_path.exists() or read_records(workspace.ledger_path) == []
    assert "assertions: passed" not in refused.stderr
    with engine_trusts(secure.host, secure.cert.ca_path):
        done = _imagekit(*argv, "--tag", "trusted", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["builder"] == "registry"
    assert doc["pushed"].startswith(f"{secure.host}/{repository}@sha256:")
    assert doc["tag"] == f"{secure.host}/{repository}:trusted"
    assertions = doc["assertions"]
    assert assertions["status"] == "passed", assertions
    assert assertions["engine_image"] == doc["pushed"]
    assert assertions["passed"], assertions
    assert _tags(secure, repository) == ["trusted"]
    records = read_records(workspace.ledger_path)
    assert [r.kind for r in records] == ["build", "push"]
    assert records[0].status == "built" and records[0].images["image"] == doc["pushed"], records


def test_a_push_by_the_engine_without_the_ca_is_one_line_naming_the_registry(
    engine: Engine,
    secure: SecureRegistry,
    base_image: BaseImage,
    forget_after: None,
    tmp_path: Path,
) -> None:
    repo = f"{secure.host}/imagekit-test/pushed"
    with pytest.raises(RegistryTLSError) as caught:
        push_image(engine, base_image.local_tag, repo, tmp_path / "push.log")
    assert caught.value.exit_code == 3
    assert caught.value.message == (
        f"{secure.host}: the Docker engine could not verify the TLS certificate of "
        f"{secure.host} (x509: certificate signed by unknown authority)"
    )
    assert f"{ENGINE_CERTS_D}/{secure.host}/ca.crt" in (caught.value.hint or "")
    with engine_trusts(secure.host, secure.cert.ca_path):
        pushed, digest = push_image(engine, base_image.local_tag, repo, tmp_path / "push.log")
    assert pushed == f"{repo}@{digest}"


def test_a_registry_answering_the_engine_in_plain_http_says_what_to_do(
    engine: Engine,
    make_registry: MakeRegistry,
    base_image: BaseImage,
    tmp_path: Path,
) -> None:
    """A name on ::1 is secure to the engine, so it speaks TLS to a plain-HTTP registry."""
    with hosts_entry(new_name()) as name:
        plain = make_registry(address=SECURE_LOOPBACK, name=name)
        repo = f"{plain.host}/imagekit-test/plain"
        try:
            with pytest.raises(RegistryTLSError) as caught:
                push_image(engine, base_image.local_tag, repo, tmp_path / "push.log")
        finally:
            _forget(engine, plain.host)
    assert caught.value.message == (
        f"{plain.host}: the Docker engine spoke TLS to {plain.host}, which answered in plain "
        "HTTP (server gave HTTP response to HTTPS client)"
    )
    assert f"add {plain.host} to the engine's insecure-registries" in (caught.value.hint or "")
