"""The cluster-side judges, run offline on the policies docs/ATTESTATIONS.md shows:

- Kyverno's CLI: the ClusterPolicy, run by `kyverno apply POLICY --resource POD` against a
  Pod naming the image, as the admission controller would run it (the CLI holds the same
  verifyImages engine);
- the sigstore policy-controller's tester: the ClusterImagePolicy, run by
  `policy-tester --policy POLICY --image REF` (the admission webhook's validation code).

The policies are read from the docs, never written here: the tests run the blocks users copy,
with their placeholders (the image pattern and the public key) filled in and nothing else
changed. The same goes for the CUE policy the docs give cosign.

Both run offline: the Kyverno rule asks no transparency log (`rekor.ignoreTlog`) and no
certificate timestamp (`ctlog.ignoreSCT`), the policy-controller's key authority names no
transparency log, and the environment they get makes any call beyond loopback fail (every
proxy variable names a closed loopback port, and SSL_CERT_FILE holds only the test CA, or
nothing trusted), so a verdict that needed the internet would be an error. Both speak plain
HTTP to 127.0.0.1, localhost and [::1] (go-containerregistry's rule), which is where the test
registries are; a registry with a private CA is trusted through SSL_CERT_FILE.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.gotools import tool
from tests.support.registries import free_port

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ATTESTATIONS.md"
#: The placeholders of the docs' policies, which the tests fill in.
DOC_IMAGES = "registry.example.com/models/*"  # Kyverno's wildcard
DOC_GLOB = "registry.example.com/models/**"  # the policy-controller's glob
DOC_KEY = "-----BEGIN PUBLIC KEY-----\n... ci.pub ...\n-----END PUBLIC KEY-----"


def doc_block(language: str, marker: str) -> str:
    """The one fenced LANGUAGE block of docs/ATTESTATIONS.md that contains MARKER."""
    blocks: list[str] = re.findall(rf"^```{language}\n(.*?)^```$", DOCS.read_text(), re.M | re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"docs/ATTESTATIONS.md: {len(found)} {language} blocks with {marker}"
    return found[0]


def docs_policy(images: str, public_key: Path) -> dict[str, Any]:
    """The docs' ClusterPolicy, its image pattern and public key replaced by the test's."""
    policy: dict[str, Any] = yaml.safe_load(doc_block("yaml", "kind: ClusterPolicy"))
    (rule,) = policy["spec"]["rules"]
    (verify,) = rule["verifyImages"]
    assert verify["imageReferences"] == [DOC_IMAGES], verify["imageReferences"]
    verify["imageReferences"] = [images]
    (attestation,) = verify["attestations"]
    (attestor,) = attestation["attestors"]
    (entry,) = attestor["entries"]
    assert entry["keys"]["publicKeys"] == DOC_KEY, entry["keys"]["publicKeys"]
    entry["keys"]["publicKeys"] = public_key.read_text().strip()
    return policy


@dataclass(frozen=True)
class KyvernoVerdict:
    """What `kyverno apply` said of the Pod: the policy report's results, each (result,
    message), and the exit code (0 every rule passed, 1 one failed or errored). The rule gives
    two results, in either order: the attestations' check and the image's verification
    (`required`)."""

    returncode: int
    results: tuple[tuple[str, str], ...]
    output: str

    @property
    def admitted(self) -> bool:
        return self.returncode == 0 and bool(self.results) and self.result == "pass"

    @property
    def result(self) -> str:
        """pass when every result passed; else the first other result (fail, error, skip)."""
        said = [result for result, _ in self.results if result != "pass"]
        return said[0] if said else ("pass" if self.results else "")

    @property
    def message(self) -> str:
        """Every result's message (the report lists them in no fixed order)."""
        return "; ".join(message for _, message in self.results)


def pod(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "model-server", "namespace": "default"},
        "spec": {"containers": [{"name": "server", "image": image}]},
    }


def offline_env(home: Path, ca_bundle: Path | None = None) -> dict[str, str]:
    """An environment with nothing beyond loopback: a closed port as every proxy (Go never
    proxies loopback), SSL_CERT_FILE with the given CA only (or an empty bundle), and an
    empty docker configuration (no credentials of this machine)."""
    closed = f"http://127.0.0.1:{free_port()}"
    bundle = ca_bundle
    if bundle is None:
        bundle = home / "no-ca.pem"
        bundle.write_text("")
    docker = home / "docker"
    docker.mkdir(exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "DOCKER_CONFIG": str(docker),
        "KUBECONFIG": str(home / "no-kubeconfig"),
        "SSL_CERT_FILE": str(bundle),
        "SSL_CERT_DIR": str(home / "no-ca-dir"),
        "HTTPS_PROXY": closed,
        "HTTP_PROXY": closed,
        "https_proxy": closed,
        "http_proxy": closed,
        "NO_PROXY": "",
        "no_proxy": "",
    }


def kyverno_apply(
    policy: dict[str, Any], image: str, workdir: Path, *, ca_bundle: Path | None = None
) -> KyvernoVerdict:
    """`kyverno apply policy.yaml --resource pod.yaml --registry` (the CLI's switch for
    reading the registry) with a policy report in JSON, in an offline environment."""
    return kyverno_judge(policy, pod(image), workdir, ca_bundle=ca_bundle)


def kyverno_judge(
    policy: dict[str, Any],
    resource: dict[str, Any],
    workdir: Path,
    *,
    ca_bundle: Path | None = None,
) -> KyvernoVerdict:
    """`kyverno apply` of POLICY to RESOURCE (a Pod, a Job...) as kyverno_apply runs it."""
    workdir.mkdir(parents=True, exist_ok=True)
    policy_path = workdir / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy, sort_keys=False))
    pod_path = workdir / "resource.yaml"
    pod_path.write_text(yaml.safe_dump(resource, sort_keys=False))
    done = subprocess.run(  # noqa: S603 - a test's own command line
        [
            tool("kyverno"),
            "apply",
            str(policy_path),
            "--resource",
            str(pod_path),
            "--registry",
            "--policy-report",
            "--output-format",
            "json",
            "--remove-color",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(workdir, ca_bundle),
        check=False,
    )
    return KyvernoVerdict(done.returncode, report_results(done.stdout), done.stdout + done.stderr)


def report_results(stdout: str) -> tuple[tuple[str, str], ...]:
    """The results of the policy report `--policy-report --output-format json` prints after
    its warnings; none where no report came (the caller then sees no "pass")."""
    start = stdout.find("{")
    if start < 0:
        return ()
    try:
        report, _ = json.JSONDecoder().raw_decode(stdout[start:])
    except json.JSONDecodeError:
        return ()
    return tuple(
        (str(r.get("result", "")), str(r.get("message", ""))) for r in report.get("results") or []
    )


def docs_image_policy(glob: str, public_key: Path) -> dict[str, Any]:
    """The docs' ClusterImagePolicy, its image glob and its authorities' key replaced."""
    policy: dict[str, Any] = yaml.safe_load(doc_block("yaml", "kind: ClusterImagePolicy"))
    spec = policy["spec"]
    assert spec["images"] == [{"glob": DOC_GLOB}], spec["images"]
    spec["images"] = [{"glob": glob}]
    for authority in spec["authorities"]:
        assert authority["key"]["data"] == DOC_KEY + "\n", authority["key"]
        authority["key"]["data"] = public_key.read_text()
    return policy


@dataclass(frozen=True)
class PolicyControllerVerdict:
    """What the policy-controller's tester said: exit 0 and "Verification was successful!"
    when the webhook would admit the image; otherwise its errors (JSON on stdout)."""

    returncode: int
    output: str

    @property
    def admitted(self) -> bool:
        return self.returncode == 0 and "Verification was successful!" in self.output


def policy_tester(
    policy: dict[str, Any], image: str, workdir: Path, *, ca_bundle: Path | None = None
) -> PolicyControllerVerdict:
    """`policy-tester --policy policy.yaml --image IMAGE` in an offline environment."""
    workdir.mkdir(parents=True, exist_ok=True)
    policy_path = workdir / "image-policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy, sort_keys=False))
    done = subprocess.run(  # noqa: S603 - a test's own command line
        [tool("policy-tester"), "--policy", str(policy_path), "--image", image],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(workdir, ca_bundle),
        check=False,
    )
    return PolicyControllerVerdict(done.returncode, done.stdout + done.stderr)
