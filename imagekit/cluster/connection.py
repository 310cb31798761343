"""Which Kubernetes cluster imagekit talks to, found the way kubectl finds it.

``--kubeconfig FILE`` first; else ``KUBECONFIG`` (several files joined by ``:``, merged as
kubectl merges them: the first file to name a cluster, user or context wins, and the first
current-context set wins); else ``~/.kube/config``; else, inside a pod, the pod's service
account (its token, CA and namespace, and ``KUBERNETES_SERVICE_HOST``/``_PORT``). Then
``--context`` picks a context (default: the current one) and ``--namespace`` the namespace
(default: the context's, else ``default``).

The client is lightkube (0.x): typed models of the API's resources, kubeconfig and in-cluster
loading, and httpx underneath, the HTTP client imagekit's registry client uses too; it is
imported on first use only. Its 1.x line moved to another HTTP package (httpx2), so the
dependency stays below 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagekit import yamldoc
from imagekit.errors import ClusterUnavailable, UsageError
from imagekit.files import read_regular

if TYPE_CHECKING:
    from lightkube import Client

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")
FIELD_MANAGER = "imagekit"
# Paths inside a kubeconfig that are relative to the file that names them.
_FILE_KEYS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


@dataclass(frozen=True)
class ClusterTarget:
    """What the user named: ``--kubeconfig``, ``--context``, ``--namespace`` (each optional)."""

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Connection:
    """A client of one cluster, and where it points (for reports and records)."""

    client: Client
    server: str
    context: str | None  # None for the in-cluster service account
    namespace: str
    source: str  # the kubeconfig file(s), or "in-cluster service account"

    def close(self) -> None:
        """Close the client's connections (a Connection is a context manager too)."""
        self.client.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _absolute(document: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A kubeconfig document whose file paths no longer depend on the file's folder."""
    for section, (inner, keys) in _FILE_KEYS.items():
        for entry in document.get(section) or []:
            body = entry.get(inner) or {}
            for key in keys:
                value = body.get(key)
                if isinstance(value, str) and value and not os.path.isabs(value):
                    body[key] = str(folder / value)
    return document


def _merged(paths: list[Path]) -> dict[str, Any]:
    import yaml

    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {section: set() for section in merged}
    for path in paths:
        try:
            document = yamldoc.load(read_regular(path, "kubeconfig")) or {}
        except OSError as exc:
            raise UsageError(f"cannot read the kubeconfig {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            said = yamldoc.describe(exc)
            raise UsageError(f"the kubeconfig {path} is not YAML imagekit reads: {said}") from None
        if not isinstance(document, dict):
            raise UsageError(f"the kubeconfig {path} is not a mapping")
        document = _absolute(document, path.parent.resolve())
        for section in merged:
            for entry in document.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") not in seen[section]:
                    seen[section].add(str(entry.get("name")))
                    merged[section].append(entry)
        if "current-context" not in merged and document.get("current-context"):
            merged["current-context"] = document["current-context"]
    return merged


def _kubeconfig_files(target: ClusterTarget) -> list[Path]:
    if target.kubeconfig is not None:
        if not target.kubeconfig.is_file():
            raise UsageError(f"the kubeconfig {target.kubeconfig} does not exist")
        return [target.kubeconfig]
    listed = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(":") if p]
    if listed:
        found = [path for path in listed if path.is_file()]
        if not found:
            raise UsageError(f"none of the files KUBECONFIG names exists: {listed}")
        return found
    default = DEFAULT_KUBECONFIG.expanduser()
    return [default] if default.is_file() else []


def connect(target: ClusterTarget, *, timeout_s: float = 30.0) -> Connection:
    """A client for the cluster ``target`` names; UsageError when nothing names one."""
    import httpx
    from lightkube import Client, ConfigError
    from lightkube.config.kubeconfig import KubeConfig

    files = _kubeconfig_files(target)
    try:
        if files:
            config = KubeConfig.from_dict(_merged(files), fname=files[0])
            single = config.get(target.context)
            source = ":".join(str(path) for path in files)
        elif (SERVICE_ACCOUNT / "token").is_file() and "KUBERNETES_SERVICE_HOST" in os.environ:
            if target.context is not None:
                raise UsageError(
                    "--context needs a kubeconfig; only the in-cluster account is here"
                )
            single = KubeConfig.from_service_account(SERVICE_ACCOUNT).get()
            source = "in-cluster service account"
        else:
            raise UsageError(
                "no cluster is configured",
                hint="pass --kubeconfig FILE, set KUBECONFIG, or write ~/.kube/config",
            )
    except ConfigError as exc:
        raise UsageError(f"the kubeconfig cannot be used: {exc}") from exc
    if single is None:  # KubeConfig.get raises rather than answer None without a default
        raise UsageError("the kubeconfig names no context to use", hint="pass --context NAME")
    namespace = target.namespace or single.namespace or "default"
    try:
        client = Client(
            single,
            namespace=namespace,
            timeout=httpx.Timeout(timeout_s),
            field_manager=FIELD_MANAGER,
        )
    except (ConfigError, OSError, ValueError) as exc:
        raise ClusterUnavailable(
            f"cannot make a client for {single.cluster.server}: {exc}"
        ) from exc
    return Connection(
        client=client,
        server=single.cluster.server,
        context=single.context_name if files else None,
        namespace=namespace,
        source=source,
    )
