"""Debian's tinyproxy as the HTTPS_PROXY in front of the test registries (CONNECT tunnels).

A real forward proxy, so that what passes through it is what a corporate proxy passes: the
client's TLS runs end to end inside the tunnel, and the proxy only logs where it went.
"""

from __future__ import annotations

import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

from tests.support.daemons import start_logged, stop_process
from tests.support.registries import free_port

TINYPROXY = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"


@dataclass
class RunningProxy:
    url: str
    log_path: Path
    process: Popen[bytes] | None = field(default=None, repr=False)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        stop_process(self.process, timeout=10)


def start_tinyproxy(workdir: Path) -> RunningProxy:
    """tinyproxy on a free 127.0.0.1 port, in the foreground, logging every connection."""
    if not Path(TINYPROXY).exists():
        raise RuntimeError(
            "tinyproxy is missing: run scripts/setup-host.sh (apt-get install tinyproxy)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "tinyproxy.log"
    config = workdir / "tinyproxy.conf"
    # No ConnectPort line: CONNECT to every port (the registries' ports are random).
    config.write_text(
        f"Port {port}\nListen 127.0.0.1\nAllow 127.0.0.1\nTimeout 120\nMaxClients 50\n"
        f'LogFile "{log_path}"\nLogLevel Connect\n'
    )
    process = start_logged([TINYPROXY, "-d", "-c", str(config)], workdir / "stdout.log")
    proxy = RunningProxy(f"http://127.0.0.1:{port}", log_path, process)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tinyproxy exited: {(workdir / 'stdout.log').read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proxy
        except OSError:
            time.sleep(0.1)
    proxy.stop()
    raise RuntimeError(f"tinyproxy did not listen on {port} in 15 s")
