"""doctor's checks on hosts described through HostFacts, and registries through MockTransport."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from imagekit.flows.doctor import (
    HEADROOM_FIXED,
    NO,
    OK,
    SKIP,
    DoctorReport,
    GiB,
    HostFacts,
    PreflightCheck,
    PreflightStatus,
    check_ca_bundle,
    check_disk,
    check_platform,
    check_registry,
    host_architecture,
)
from imagekit.plans.steps import PipInstall
from imagekit.refs import parse_platform
from imagekit.registry.client import RegistryClient

Usage = namedtuple("Usage", "total used free")


def facts(tmp_path: Path, **kw: Any) -> HostFacts:
    binfmt = tmp_path / "binfmt"
    binfmt.mkdir(exist_ok=True)
    defaults: dict[str, Any] = {
        "machine": "x86_64",
        "binfmt_dir": binfmt,
        "ca_bundle": tmp_path / "ca.pem",
        "disk_usage": lambda _p: Usage(100 * GiB, 0, 50 * GiB),
    }
    defaults.update(kw)
    return HostFacts(**defaults)


def fake_plan(platform: str = "linux/amd64", pip: bool = True) -> Any:
    """Only what the checks read from a LoadedPlan: its platform and its steps."""
    steps = [PipInstall(kind="pip_install", requirements=["tqdm==4.66.1"])] if pip else []
    return SimpleNamespace(
        platform=parse_platform(platform),
        platforms=(parse_platform(platform),),
        plan=SimpleNamespace(steps=steps),
    )


def test_host_architecture_names() -> None:
    assert host_architecture("x86_64") == "amd64"
    assert host_architecture("aarch64") == "arm64"


def test_platform_native(tmp_path: Path) -> None:
    check = check_platform(fake_plan("linux/amd64"), facts(tmp_path))
    assert check.status == OK and "natively" in check.detail


def test_platform_foreign_without_emulation_says_no(tmp_path: Path) -> None:
    check = check_platform(fake_plan("linux/arm64"), facts(tmp_path))
    assert check.status == NO
    assert "qemu-aarch64" in check.detail
    assert check.hint and "qemu-user-static" in check.hint


def test_platform_foreign_with_enabled_handler(tmp_path: Path) -> None:
    f = facts(tmp_path)
    (f.binfmt_dir / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64\n")
    check = check_platform(fake_plan("linux/arm64"), f)
    assert check.status == OK and "emulated" in check.detail


def test_platform_foreign_with_disabled_handler(tmp_path: Path) -> None:
    f = facts(tmp_path)
    (f.binfmt_dir / "qemu-aarch64").write_text("disabled\n")
    assert check_platform(fake_plan("linux/arm64"), f).status == NO


def test_a_plan_of_several_platforms_says_no_when_one_cannot_run_here(tmp_path: Path) -> None:
    f = facts(tmp_path)
    (f.binfmt_dir / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64\n")
    plan = fake_plan()
    plan.platforms = tuple(parse_platform(p) for p in ("linux/amd64", "linux/arm64"))
    check = check_platform(plan, f)
    assert check.status == OK
    assert "runs linux/amd64 natively" in check.detail and "emulated" in check.detail
    plan.platforms = (*plan.platforms, parse_platform("linux/s390x"))
    check = check_platform(plan, f)
    assert check.status == NO and "linux/s390x" in check.detail and "qemu-s390x" in check.detail
    assert check.hint and "qemu-user-static" in check.hint


def test_platform_without_plan_is_a_skip(tmp_path: Path) -> None:
    assert check_platform(None, facts(tmp_path)).status == SKIP


def test_ca_bundle_missing_is_no_when_pip_runs(tmp_path: Path) -> None:
    check = check_ca_bundle(fake_plan(pip=True), facts(tmp_path))
    assert check.status == NO
    assert check_ca_bundle(fake_plan(pip=False), facts(tmp_path)).status == SKIP


def test_ca_bundle_not_pem_is_no(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    assert check_ca_bundle(fake_plan(), facts(tmp_path)).status == NO


def test_ca_bundle_contents_never_printed(tmp_path: Path) -> None:
    secret = "MIIBsecretlookingbase64"
    (tmp_path / "ca.pem").write_text(
        f"-----BEGIN CERTIFICATE-----\n{secret}\n-----END CERTIFICATE-----\n"
    )
    check = check_ca_bundle(fake_plan(), facts(tmp_path))
    assert check.status == OK
    assert secret not in str(check.to_json())


def test_disk_enough_and_not_enough(tmp_path: Path) -> None:
    base = 2 * GiB
    plenty = facts(tmp_path, disk_usage=lambda _p: Usage(0, 0, 40 * GiB))
    assert check_disk("/var/lib/docker", base, None, plenty).status == OK
    need = 4 * base + HEADROOM_FIXED
    short = facts(tmp_path, disk_usage=lambda _p: Usage(0, 0, need - 1))
    check = check_disk("/var/lib/docker", base, None, short)
    assert check.status == NO and "needed" in check.detail


def test_disk_unknown_root_or_base_fails_closed(tmp_path: Path) -> None:
    f = facts(tmp_path)
    assert check_disk(None, GiB, None, f).status == NO
    assert check_disk("/var/lib/docker", None, "base unreachable", f).status == NO

    def broken(_p: str) -> Any:
        raise FileNotFoundError(2, "No such file or directory")

    assert check_disk("/nope", GiB, None, facts(tmp_path, disk_usage=broken)).status == NO


def test_disk_without_plan_is_a_skip(tmp_path: Path) -> None:
    assert check_disk("/var/lib/docker", None, None, facts(tmp_path)).status == SKIP


def registry_client(handler: Any) -> RegistryClient:
    return RegistryClient(transport=httpx.MockTransport(handler), max_attempts=1)


def test_registry_ok() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={}, headers={"Docker-Distribution-API-Version": "registry/2.0"}
        )

    with registry_client(handler) as client:
        check = check_registry(client, "127.0.0.1:5000", "push")
    assert check.status == OK and check.name == "registry push"


def test_registry_refusing_credentials_says_no() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401,
            json={"errors": [{"code": "UNAUTHORIZED", "message": "no"}]},
            headers={"Www-Authenticate": 'Basic realm="r"'},
        )

    with registry_client(handler) as client:
        check = check_registry(client, "127.0.0.1:5000", "mirror")
    assert check.status == NO


def test_registry_that_is_not_one_says_no() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>proxy login</html>")

    with registry_client(handler) as client:
        assert check_registry(client, "127.0.0.1:5000", "push").status == NO


def test_report_fails_when_any_check_says_no() -> None:
    good = DoctorReport("demo", (PreflightCheck("a", OK, "x"), PreflightCheck("b", SKIP, "y")))
    assert good.ok
    bad = DoctorReport("demo", (PreflightCheck("a", OK, "x"), PreflightCheck("b", NO, "y", "do z")))
    assert not bad.ok and [c.name for c in bad.failed] == ["b"]
    lines = bad.lines()
    assert lines[1].startswith("NO ") and "hint: do z" in lines[2]
    assert bad.to_json()["ok"] is False


@pytest.mark.parametrize("status", [OK, SKIP])
def test_report_ok_statuses(status: PreflightStatus) -> None:
    assert DoctorReport(None, (PreflightCheck("a", status, "x"),)).ok


def test_push_access_opens_and_cancels_an_upload() -> None:
    from imagekit.flows.doctor import check_push_access

    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/team/demo/blobs/uploads/u1"})
        return httpx.Response(204)

    with registry_client(handler) as client:
        check = check_push_access(client, "127.0.0.1:5000/team/demo", "push")
    assert check.status == OK
    assert seen == [
        ("POST", "/v2/team/demo/blobs/uploads/"),
        ("DELETE", "/v2/team/demo/blobs/uploads/u1"),
    ]


def test_push_access_denied_says_no() -> None:
    from imagekit.flows.doctor import check_push_access

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            403, json={"errors": [{"code": "DENIED", "message": "requested access is denied"}]}
        )

    with registry_client(handler) as client:
        check = check_push_access(client, "127.0.0.1:5000/team/demo", "mirror")
    assert check.status == NO and check.name == "push access mirror"
