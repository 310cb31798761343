"""`imagekit ledger show` and `ledger lock` as a person reads them."""

from __future__ import annotations

import json
from pathlib import Path

from imagekit.workspace import Workspace
from tests.unit.ledger.support import Rec, append_all, run_cli

IMAGE = "127.0.0.1:5000/mine/app@sha256:" + "e" * 64


def test_show_has_column_headers_above_the_records(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path)
    append_all(ws, Rec("audit", None, {"image": IMAGE}, "CPU_PASS", "cpu only"))
    shown = run_cli(ws, "ledger", "show")
    assert shown.returncode == 0, shown.stderr
    header, first = shown.stdout.splitlines()[:2]
    assert header.split() == ["SEQ", "TIME", "KIND", "PLAN", "STATUS", "IMAGES"]
    assert first.split()[0] == "1" and "audit" in first and "CPU_PASS" in first
    assert header.index("KIND") == first.index("audit")  # the columns line up
    assert header.index("STATUS") == first.index("CPU_PASS")
    as_json = run_cli(ws, "ledger", "show", "--json")
    assert "SEQ" not in as_json.stdout and json.loads(as_json.stdout)["records"]


def test_lock_says_it_printed_and_why_no_plan_is_listed(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path)
    append_all(ws, Rec("audit", None, {"image": IMAGE}, "CPU_PASS", "cpu only"))
    printed = run_cli(ws, "ledger", "lock")
    assert printed.returncode == 0
    lock = json.loads(printed.stdout)
    assert lock["images"] == {} and IMAGE in lock["not_in_a_plan"]["images"]
    assert "0 plans; 1 image recorded without a plan, listed under not_in_a_plan" in (
        printed.stderr
    )
    assert "printed only: `-o manifests/images.lock.json` writes it" in printed.stderr
    assert "hint: no plan has records yet" in printed.stderr
    out = tmp_path / "images.lock.json"
    written = run_cli(ws, "ledger", "lock", "-o", str(out))
    assert written.stdout.startswith(f"wrote {out} (0 plans; 1 image recorded without a plan")
    assert json.loads(out.read_text()) == lock
