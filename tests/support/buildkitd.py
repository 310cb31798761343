"""A private, real buildkitd (the pinned one scripts/setup-host.sh builds into .tools/bin).

Rootful, with the runc worker (Debian's runc), its own root, state and unix socket under a
temp folder, and nothing else: no containerd worker, no TCP listener unless asked for (then on
127.0.0.1 only). The registries the tests start speak plain HTTP on loopback, so the config
names each as ``http = true``; host networking is the one entitlement it allows (imagekit
builds with --network host, as on the engine path).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.daemons import start_logged, stop_process
from tests.support.tls import ServerCertificate

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / ".tools" / "bin"
BUILDKITD = str(TOOLS / "buildkitd") if (TOOLS / "buildkitd").exists() else "buildkitd"
BUILDCTL = str(TOOLS / "buildctl") if (TOOLS / "buildctl").exists() else "buildctl"
RUNC = shutil.which("runc") or "/usr/sbin/runc"


@dataclass
class RunningBuildkitd:
    root: Path
    address: str  # unix:///... (and tcp_address when a TCP listener was asked for)
    log_path: Path
    tcp_address: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def buildctl(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BUILDCTL, "--addr", self.address, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop(self) -> None:
        """Stop the daemon and remove its state (content store and snapshots, about 1 GB
        after the remote-build tests; pytest keeps three runs' temporary folders, and
        these filled the disk). Its configuration and log stay beside it."""
        stop_process(self.process, timeout=30)
        shutil.rmtree(self.root / "root", ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(
    root: Path, registries: list[str], tcp: str | None, tls: ServerCertificate | None
) -> str:
    addresses = [f'"unix://{root}/buildkitd.sock"'] + ([f'"{tcp}"'] if tcp else [])
    text = f"""root = "{root}/root"
insecure-entitlements = ["network.host"]

[grpc]
  address = [{", ".join(addresses)}]

{_tls(tls)}
[worker.oci]
  enabled = true
  binary = "{RUNC}"
  gc = true

[worker.containerd]
  enabled = false
"""
    for host in registries:
        text += f'\n[registry."{host}"]\n  http = true\n'
    return text


def _tls(tls: ServerCertificate | None) -> str:
    """Mutual TLS on the listeners: the daemon's certificate, and the CA its clients' are
    checked against."""
    if tls is None:
        return ""
    return f"""[grpc.tls]
  cert = "{tls.chain_path}"
  key = "{tls.key_path}"
  ca = "{tls.ca_path}"
"""


def start_buildkitd(
    root: Path,
    registries: list[str],
    *,
    tcp: bool = False,
    tls: ServerCertificate | None = None,
    timeout: float = 60.0,
) -> RunningBuildkitd:
    """Start buildkitd with everything under ``root``; the caller stops it."""
    root.mkdir(parents=True, exist_ok=True)
    tcp_address = f"tcp://127.0.0.1:{free_port()}" if tcp else None
    config = root / "buildkitd.toml"
    config.write_text(_config(root, registries, tcp_address, tls))
    log_path = root / "buildkitd.log"
    process = start_logged([BUILDKITD, "--config", str(config)], log_path)
    instance = RunningBuildkitd(
        root, f"unix://{root}/buildkitd.sock", log_path, tcp_address, process
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"buildkitd exited early: {log_path.read_text()[-3000:]}")
        # TLS is the TCP listener's; the unix socket answers without it.
        if (root / "buildkitd.sock").exists() and instance.buildctl(
            "debug", "workers", timeout=10
        ).returncode == 0:
            return instance
        time.sleep(0.2)
    instance.stop()
    raise RuntimeError(f"buildkitd did not answer in {timeout}s: {log_path.read_text()[-3000:]}")
