"""A private, real containerd (Debian's 1.6, the one docker.io brings) with its CRI plugin on.

It shares nothing with the engine's containerd: its own root, state, sockets, CNI and opt
folders under a temp folder, and a config that names each. The CRI plugin loads (without a
CNI network, which only running pods would need) and so names pulled images the way a
kubelet's containerd does: it adds the ``sha256:<config>`` record for every image in the
``k8s.io`` namespace. No container is ever run in it, so no shim is started.

Given a ``sandbox_image``, it is a kubelet's runtime instead (tests/support/cluster.py):

- ``restrict_oom_score_adj``: root on our machines lacks CAP_SYS_RESOURCE, so the negative
  oom_score_adj the pod sandbox asks for (-998) fails in runc ("can't get final child's PID
  from pipe: EOF"); restricted, the runtime keeps it no lower than its own;
- ``sandbox_image``: the pause image, which the cluster imports (registry.k8s.io cannot be
  reached from here);
- ``config_path``: a ``hosts.toml`` per loopback registry the kubelet pulls from over plain
  HTTP (``trust_registry``); containerd reads the folder at each pull;
- a CNI configuration of the ``loopback`` plugin alone: the runtime then reports its network
  ready, so the node is Ready, yet there is no pod network at all. Host-network pods run;
  any other pod's sandbox fails to start. No bridge, no route, no masquerade.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.daemons import start_logged, stop_process

CONTAINERD_BINARY = shutil.which("containerd") or "/usr/bin/containerd"
CTR_BINARY = shutil.which("ctr") or "/usr/bin/ctr"
NAMESPACE = "k8s.io"


@dataclass
class RunningContainerd:
    root: Path
    address: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def ctr(self, *args: str, namespace: str = NAMESPACE) -> subprocess.CompletedProcess[bytes]:
        """Run Debian's ctr against this instance (for tests that check imagekit's reading)."""
        return subprocess.run(
            [CTR_BINARY, "--address", self.address, "--namespace", namespace, *args],
            capture_output=True,
            timeout=120,
            check=False,
        )

    def trust_registry(self, host: str) -> None:
        """Let the CRI plugin pull from ``host`` (a loopback registry) over plain HTTP."""
        folder = self.root / "certs.d" / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts.toml").write_text(
            f'server = "http://{host}"\n\n[host."http://{host}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )

    def stop(self) -> None:
        stop_process(self.process, timeout=20)


# The CNI loopback plugin: Debian's containernetworking-plugins (setup installs it).
CNI_LOOPBACK = Path("/usr/lib/cni/loopback")
_NO_POD_NETWORK = """{
  "cniVersion": "0.4.0",
  "name": "no-pod-network",
  "plugins": [{"type": "loopback"}]
}
"""


def _pod_settings(root: Path, sandbox_image: str | None) -> str:
    if sandbox_image is None:
        return '  sandbox_image = "imagekit.invalid/pause:never-pulled"\n'
    return f"""  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{root}/certs.d"
"""


def _config(root: Path, sandbox_image: str | None = None) -> str:
    # https://github.com/containerd/containerd/blob/release/1.6/docs/man/containerd-config.toml.5.md
    return f"""version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{root}/containerd.sock"

[ttrpc]
  address = "{root}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
{_pod_settings(root, sandbox_image)}  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{root}/cni/bin"
    conf_dir = "{root}/cni/conf"
"""


def _ready(instance: RunningContainerd) -> bool:
    plugins = instance.ctr("plugins", "ls")
    if plugins.returncode != 0:
        return False
    for line in plugins.stdout.decode().splitlines():
        cells = line.split()
        if cells[:2] == ["io.containerd.grpc.v1", "cri"]:
            return cells[-1] == "ok"
    return False


def start_containerd(
    root: Path, timeout: float = 60.0, *, sandbox_image: str | None = None
) -> RunningContainerd:
    """Start containerd with everything under ``root``; the caller stops it. With a
    ``sandbox_image``, configured as a kubelet's runtime (see above)."""
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("cni/bin", "cni/conf", "opt", "certs.d"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    if sandbox_image is not None:
        (root / "cni/conf/10-no-pod-network.conflist").write_text(_NO_POD_NETWORK)
        if CNI_LOOPBACK.exists():
            (root / "cni/bin/loopback").symlink_to(CNI_LOOPBACK)
    config = root / "config.toml"
    config.write_text(_config(root, sandbox_image))
    log_path = root / "containerd.log"
    process = start_logged(
        [CONTAINERD_BINARY, "--config", str(config)],
        log_path,
        own_session=sandbox_image is not None,
    )
    instance = RunningContainerd(root, str(root / "containerd.sock"), log_path, process)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"containerd exited early: {log_path.read_text()[-3000:]}")
        if (root / "containerd.sock").exists() and _ready(instance):
            return instance
        time.sleep(0.2)
    instance.stop()
    raise RuntimeError(f"containerd did not answer in {timeout}s: {log_path.read_text()[-3000:]}")
