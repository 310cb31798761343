"""The vulnerability stage: never a pass when the service did not answer."""

from __future__ import annotations

import socket

import pytest

from imagekit.audit.vulns import requirement_lines, scan


def test_requirement_lines_keep_only_what_an_index_could_know() -> None:
    lines, left_out = requirement_lines(
        [
            ("Pillow", "11.3.0"),
            ("torch", "2.11.0+cu130"),
            ("weird", "1.0-debian"),
            ("pillow", "12.2.0"),
        ]
    )
    assert lines == ["pillow==11.3.0"]
    assert any("torch" in why and "local version" in why for why in left_out)
    assert any("weird" in why for why in left_out)
    assert any("second version" in why for why in left_out)


def test_offline_skips_and_says_so() -> None:
    result = scan([("pip", "23.0.1")], offline=True)
    assert result.status == "skipped"
    assert "--offline" in result.reason


def test_an_unreachable_service_is_unknown_with_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real pip-audit, sent through a proxy port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = scan([("pip", "23.0.1")], offline=False, timeout_s=300)
    assert result.status == "unknown"
    assert "pip-audit gave no report" in result.reason
    assert result.exit_code not in (None, 0)
    assert result.requirements == ("pip==23.0.1",)
