"""A real single-node Kubernetes on loopback, for the tests and for `make cluster`.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet, all the
release setup builds from Go modules (scripts/lib/kube.sh: one binary, linked under each
program's name in .tools/bin), on a private containerd with its CRI plugin
(tests/support/containerd.py). Everything of one cluster lives under one folder: its
certificates and keys (made per cluster, tests/support/kube_pki.py), etcd's data, each
component's log, the kubelet's root and pod logs, containerd's root and state, and the
kubeconfig a client uses (``Cluster.kubeconfig``, the admin's).

- Everything listens on 127.0.0.1, on free ports picked at start; etcd speaks plain HTTP
  (loopback only). The API server runs its default admission plugins (Priority among them)
  plus NodeRestriction, and authorizes with Node and RBAC; the kubelet authenticates by its
  client certificate as ``system:node:NAME`` and authorizes its own API by webhook.
- No pod network: pods run with ``hostNetwork: true``, and no other pod can start (the
  runtime's CNI is the loopback plugin alone). There is no kube-proxy and no DNS; the
  service range is a documentation range (192.0.2.0/24) that nothing routes to.
- The pod sandbox's image is the pause binary setup builds, imported into containerd's
  ``k8s.io`` namespace as ``PAUSE_IMAGE`` (registry.k8s.io cannot be reached here).
- The kubelet pulls from the tests' loopback registries over plain HTTP once
  ``trust_registry`` wrote their hosts.toml.
- The machines here run cgroup v1 (``failCgroupV1: false``, the cgroupfs driver) and have no
  swap; the kubelet puts no pod under a QoS cgroup of its own, so two clusters on one
  machine do not share cgroups.

``Cluster.stop`` ends it all: the kubelet, then every container and sandbox left in the
runtime (a pod's processes outlive containerd otherwise), containerd, the control plane and
etcd, then any mount left under the folder; the caller removes the folder.

`python -m tests.support.cluster [--dir DIR]` (`make cluster`) starts one by hand and keeps
it until Ctrl-C or SIGTERM (`make cluster-stop`); docs/development.md says how.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.containerd import RunningContainerd, start_containerd
from tests.support.daemons import start_logged, stop_process
from tests.support.kube_pki import ClusterPKI
from tests.support.registries import free_port

TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "bin"
PAUSE_IMAGE = "imagekit.local/kube-pause:1"
SERVICE_RANGE = "192.0.2.0/24"  # TEST-NET-1: documentation only, never routed
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: Host folders the kubelet makes whatever its --root-dir: its device-plugin registration
#: socket's (k8s.io/kubelet's deviceplugin/v1beta1 KubeletSocket, a Go constant) and its
#: container log links' (k8s.io/kubernetes/pkg/kubelet ContainerLogsDir). No flag or
#: configuration field moves either, so ``Cluster.stop`` tidies them (``tidy_host_dirs``).
KUBELET_HOST_DIRS = (Path("/var/lib/kubelet/device-plugins"), Path("/var/log/containers"))
KUBELET_SOCKET = "kubelet.sock"


def binary(name: str) -> str:
    """A program setup built (scripts/lib/kube.sh); missing, it says how to build it."""
    path = TOOLS / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run scripts/setup-host.sh (it builds Kubernetes)")
    return str(path)


@dataclass
class Cluster:
    root: Path
    server: str  # https://127.0.0.1:PORT
    node_name: str
    kubeconfig: Path
    ca: Path
    containerd: RunningContainerd
    started_in: float = 0.0  # seconds from nothing to a Ready node and a default service account
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _client: httpx.Client | None = field(default=None, repr=False)
    host_dirs: tuple[Path, ...] = ()  # of KUBELET_HOST_DIRS and their parents, those we made

    def log(self, component: str) -> Path:
        return self.root / "logs" / f"{component}.log"

    @property
    def api(self) -> httpx.Client:
        """An HTTP client of the admin's, for the fixture's own readiness checks."""
        assert self._client is not None
        return self._client

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """The real kubectl (the same build) against this cluster, as a user runs it."""
        return subprocess.run(  # noqa: S603 - a test's own command line
            [binary("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def kubectl_json(self, *args: str) -> Any:
        done = self.kubectl(*args, "-o", "json")
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
        return json.loads(done.stdout)

    def trust_registry(self, host: str) -> None:
        """Let the kubelet's pulls reach a loopback registry over plain HTTP."""
        self.containerd.trust_registry(host)

    def advertise_gpus(self, count: int) -> None:
        """Make the node advertise ``count`` ``nvidia.com/gpu`` by a JSON patch of its status.

        A STAND-IN for NVIDIA's device plugin, which a machine without GPUs cannot run: the
        scheduler then places pods that ask for GPUs, but the kubelet allocates nothing (no
        plugin registered the resource, so no device reaches the container), and it zeroes
        the capacity when the node registers again (patch again then).
        """
        patch = [
            {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(count)},
            {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": str(count)},
        ]
        done = self.kubectl(
            "patch", "node", self.node_name, "--subresource=status", "--type=json",
            "-p", json.dumps(patch),
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"the node's status patch was refused: {done.stderr}")

    def tails(self, lines: int = 30) -> str:
        """The end of each component's log, for a failure's message."""
        parts = []
        for path in sorted((self.root / "logs").glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
        stop_process(self.processes.pop("kubelet", None), timeout=20)
        tidy_host_dirs(self.root, self.host_dirs)
        _remove_pods_from_runtime(self.containerd)
        self.containerd.stop()
        for component in reversed(CONTROL_PLANE):
            stop_process(self.processes.pop(component, None), timeout=20)
        _unmount_under(self.root)


def host_network_pod(name: str, image: str, command: list[str], **spec: Any) -> dict[str, Any]:
    """A pod manifest that can run on this cluster: host network (there is no other), no
    service-account token, no service links, never restarted; ``spec`` adds or overrides."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": image, "command": command}],
            **spec,
        },
    }


def missing_host_dirs(dirs: tuple[Path, ...] = KUBELET_HOST_DIRS) -> tuple[Path, ...]:
    """The folders of ``dirs`` and their parents that do not exist yet, deepest first: what
    a kubelet started now would make (and its cluster may remove again)."""
    missing: list[Path] = []
    for folder in dirs:
        for each in (folder, *folder.parents):
            if each.exists() or each in missing:
                break
            missing.append(each)
    return tuple(sorted(missing, key=lambda p: len(p.parts), reverse=True))


def tidy_host_dirs(
    root: Path, made: tuple[Path, ...], dirs: tuple[Path, ...] = KUBELET_HOST_DIRS
) -> None:
    """After this cluster's kubelet stopped: its registration socket if nothing listens on it
    any more (another cluster's live kubelet keeps its own), the log links into ``root``, then
    each folder of ``made`` that is empty. A folder that was there before, or that another
    kubelet still uses, is left as it is."""
    import socket
    import stat

    plugins, logs = dirs
    sock = plugins / KUBELET_SOCKET
    try:
        is_socket = stat.S_ISSOCK(sock.lstat().st_mode)
    except OSError:
        is_socket = False
    if is_socket:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(sock))
            except ConnectionRefusedError:  # nobody listens: a stopped kubelet's
                sock.unlink(missing_ok=True)
            except OSError:
                pass
    if logs.is_dir():
        for link in logs.iterdir():
            if link.is_symlink() and Path(os.readlink(link)).is_relative_to(root):
                link.unlink(missing_ok=True)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:  # not empty (another kubelet's), or already gone
            pass


def _remove_pods_from_runtime(containerd: RunningContainerd) -> None:
    """Kill and delete every task and container the kubelet left in the runtime: a pod's
    processes (and each one's shim) would outlive containerd otherwise."""
    if containerd.process is None or containerd.process.poll() is not None:
        return
    listed = containerd.ctr("tasks", "list", "--quiet")
    tasks = listed.stdout.decode().split() if listed.returncode == 0 else []
    for task in tasks:
        containerd.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task)
    for task in tasks:
        for _ in range(50):
            if containerd.ctr("tasks", "delete", task).returncode == 0:
                break
            time.sleep(0.1)
    listed = containerd.ctr("containers", "list", "--quiet")
    for container in listed.stdout.decode().split() if listed.returncode == 0 else []:
        containerd.ctr("containers", "delete", container)


def _unmount_under(root: Path) -> None:
    """Unmount whatever is still mounted under ``root`` (deepest first)."""
    prefix = str(root.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def pause_archive(destination: Path, pause_binary: Path) -> None:
    """An OCI image archive of one layer, the pause binary as /pause, named PAUSE_IMAGE."""
    layer_buffer = io.BytesIO()
    with tarfile.open(fileobj=layer_buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = pause_binary.read_bytes()
        info = tarfile.TarInfo("pause")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
    layer = layer_buffer.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"]},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest,
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": PAUSE_IMAGE,
                        "org.opencontainers.image.ref.name": PAUSE_IMAGE.rpartition(":")[2],
                    },
                }
            ],
        }
    ).encode()
    with tarfile.open(destination, "w") as tar:
        files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": index}
        for blob in (layer, config, manifest):
            files[f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"] = blob
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))


def _kubeconfig(path: Path, server: str, ca_pem: bytes, cert: Path, key: Path, user: str) -> None:
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "imagekit-test",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(cert.read_bytes()),
                    "client-key-data": b64(key.read_bytes()),
                },
            }
        ],
        "contexts": [
            {
                "name": "imagekit-test",
                "context": {"cluster": "imagekit-test", "user": user, "namespace": "default"},
            }
        ],
        "current-context": "imagekit-test",
    }
    path.write_text(json.dumps(document, indent=2) + "\n")  # JSON is YAML
    path.chmod(0o600)


def _kubelet_config(root: Path, node: str, pki: ClusterPKI, containerd: RunningContainerd) -> str:
    serving = pki.issue("kubelet-serving", node, hosts=("127.0.0.1", "localhost", node))
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(serving.cert),
        "tlsPrivateKeyFile": str(serving.key),
        "containerRuntimeEndpoint": f"unix://{containerd.address}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "podLogsDir": str(root / "pod-logs"),
        "resolvConf": "/etc/resolv.conf",
        "makeIPTablesUtilChains": False,
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
    }
    return json.dumps(config, indent=2) + "\n"


def start_cluster(root: Path, timeout: float = 120.0) -> Cluster:
    """Start a cluster with everything under ``root``; the caller stops it (``stop``)."""
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    (root / "logs").mkdir(exist_ok=True)
    node = f"imagekit-node-{secrets.token_hex(3)}"
    pki = ClusterPKI(root / "pki")
    apiserver = pki.issue(
        "apiserver",
        "kube-apiserver",
        hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "192.0.2.1"),
    )
    admin = pki.issue("admin", "imagekit-admin", groups=("system:masters",))
    to_kubelet = pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                           groups=("system:masters",))  # fmt: skip
    service_accounts = pki.signing_key("service-accounts")
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    kubeconfigs = {}
    for user, groups in (
        ("system:kube-controller-manager", ()),
        ("system:kube-scheduler", ()),
        (f"system:node:{node}", ("system:nodes",)),
    ):
        short = user.split(":")[1]
        pair = pki.issue(short, user, groups=groups)
        kubeconfigs[short] = root / f"{short}.kubeconfig"
        _kubeconfig(kubeconfigs[short], server, pki.ca_pem, pair.cert, pair.key, user)
    kubeconfig = root / "kubeconfig"
    _kubeconfig(kubeconfig, server, pki.ca_pem, admin.cert, admin.key, "imagekit-admin")

    containerd = start_containerd(root / "containerd", sandbox_image=PAUSE_IMAGE)
    cluster = Cluster(root, server, node, kubeconfig, pki.ca, containerd)
    try:
        archive = root / "pause.tar"
        pause_archive(archive, Path(binary("kube-pause")).resolve())
        imported = containerd.ctr("images", "import", str(archive))
        if imported.returncode != 0:
            raise RuntimeError(f"ctr images import of the pause image: {imported.stderr!r}")
        (root / "kubelet.yaml").write_text(_kubelet_config(root, node, pki, containerd))
        cluster.host_dirs = missing_host_dirs()
        commands: dict[str, list[str]] = {
            "etcd": [
                "--name", "default",
                "--data-dir", str(root / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync", "--log-level", "warn",
            ],
            "kube-apiserver": [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1", f"--secure-port={api_port}",
                "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                f"--cert-dir={root / 'pki' / 'apiserver-generated'}",
                f"--tls-cert-file={apiserver.cert}", f"--tls-private-key-file={apiserver.key}",
                f"--client-ca-file={pki.ca}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={service_accounts.cert}",
                f"--service-account-signing-key-file={service_accounts.key}",
                f"--kubelet-client-certificate={to_kubelet.cert}",
                f"--kubelet-client-key={to_kubelet.key}",
                f"--kubelet-certificate-authority={pki.ca}",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
            ],
            "kube-controller-manager": [
                f"--kubeconfig={kubeconfigs['kube-controller-manager']}",
                "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
                f"--service-account-private-key-file={service_accounts.key}",
                f"--root-ca-file={pki.ca}", "--use-service-account-credentials=true",
                "--cluster-name=imagekit-test",
            ],
            "kube-scheduler": [
                f"--kubeconfig={kubeconfigs['kube-scheduler']}",
                "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
            ],
            "kubelet": [
                f"--config={root / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfigs['node']}",
                f"--root-dir={root / 'kubelet'}",
                f"--cert-dir={root / 'pki' / 'kubelet-generated'}",
                f"--hostname-override={node}", "--node-ip=127.0.0.1",
            ],
        }  # fmt: skip
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(admin.cert, admin.key)
        cluster._client = httpx.Client(base_url=server, verify=context, timeout=5)
        deadline = started + timeout
        # etcd and the API server first: the controller-manager gives up after 10 s without
        # an API server (seen at load 14, when the API server took longer than that to start).
        first = ("etcd", "kube-apiserver")
        for component in (*first, *(name for name in commands if name not in first)):
            cluster.processes[component] = start_logged(
                [binary(component), *commands[component]],
                cluster.log(component),
                own_session=True,
            )
            if component == first[-1]:
                _wait(
                    cluster, deadline, "the API server's /readyz", lambda: _ok(cluster, "/readyz")
                )
        _wait(cluster, deadline, f"node {node}", lambda: _ok(cluster, f"/api/v1/nodes/{node}"))
        _loopback_address(cluster)
        _wait(cluster, deadline, f"node {node} Ready", lambda: _node_ready(cluster))
        _wait(
            cluster,
            deadline,
            "the default service account",
            lambda: _ok(cluster, "/api/v1/namespaces/default/serviceaccounts/default"),
        )
    except BaseException:
        cluster.stop()
        raise
    cluster.started_in = time.monotonic() - started
    return cluster


def _ok(cluster: Cluster, path: str) -> bool:
    try:
        return cluster.api.get(path).status_code == 200
    except httpx.HTTPError:
        return False


def _loopback_address(cluster: Cluster) -> None:
    """Give the node the address 127.0.0.1, where its kubelet listens.

    The kubelet refuses a loopback node IP ("nodeIP can't be loopback address", logged at
    each status update) and then sets no address at all; without one the API server cannot
    reach the kubelet for a pod's log. Left to choose, it would take the address of the
    machine's default route, which is not loopback. Its status updates leave addresses it
    did not set alone, so this patch stays.
    """
    addresses = [
        {"type": "InternalIP", "address": "127.0.0.1"},
        {"type": "Hostname", "address": cluster.node_name},
    ]
    response = cluster.api.patch(
        f"/api/v1/nodes/{cluster.node_name}/status",
        content=json.dumps({"status": {"addresses": addresses}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    if response.status_code != 200:
        raise RuntimeError(f"the node's address patch was refused: {response.text}")


def _node_ready(cluster: Cluster) -> bool:
    try:
        response = cluster.api.get(f"/api/v1/nodes/{cluster.node_name}")
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    conditions = response.json().get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _wait(cluster: Cluster, deadline: float, what: str, check: Callable[[], bool]) -> None:
    while time.monotonic() < deadline:
        for component, process in cluster.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{component} exited early:\n{cluster.tails()}")
        if check():
            return
        time.sleep(0.25)
    raise RuntimeError(f"no {what} in time:\n{cluster.tails()}")


def main() -> None:
    """`make cluster`: start one, print how to reach it, keep it until SIGINT or SIGTERM."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.support.cluster")
    parser.add_argument("--dir", type=Path, default=Path(".cluster"))
    folder = parser.parse_args().dir.resolve()
    if (folder / "pid").exists():
        raise SystemExit(f"{folder}/pid exists: a cluster may run there (make cluster-stop)")
    shutil.rmtree(folder, ignore_errors=True)
    cluster = start_cluster(folder)
    (folder / "pid").write_text(f"{os.getpid()}\n")
    print(
        f"cluster up in {cluster.started_in:.1f} s: node {cluster.node_name}, {cluster.server}\n"
        f"  export KUBECONFIG={cluster.kubeconfig}\n"
        f"  kubectl (the same build): {TOOLS / 'kubectl'}\n"
        f"  logs: {folder / 'logs'}\n"
        "stop it with Ctrl-C or `make cluster-stop`",
        flush=True,
    )
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, frame: stopping.append(number))
    try:
        while not stopping:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    print("stopping the cluster", flush=True)
    cluster.stop()
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
