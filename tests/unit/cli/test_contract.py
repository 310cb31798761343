"""An interrupt's report when some parts of the work were recorded before it came."""

from __future__ import annotations

import json

import pytest

from imagekit.cli.contract import report_interrupt
from imagekit.interrupt import Interrupted


def test_an_interrupt_after_some_parts_were_recorded_says_so_not_nothing_recorded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exc = Interrupted().keeping(
        {"summary": "1 of 3 node(s) finished, recorded as ledger records [7]", "ledger_seqs": [7]},
        None,
    )
    with pytest.raises(SystemExit) as ended:
        report_interrupt(exc, as_json=True)
    assert ended.value.code == 130
    said = capsys.readouterr()
    document = json.loads(said.out)["interrupted"]
    assert document["recorded"] is True
    assert "nothing was recorded" not in document["message"]
    assert "recorded as ledger records [7]" in said.err


def test_an_interrupt_with_nothing_recorded_says_nothing_was(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        report_interrupt(Interrupted().keeping({"summary": "0 of 2 node(s) finished"}, None),
                         as_json=True)  # fmt: skip
    document = json.loads(capsys.readouterr().out)["interrupted"]
    assert document["recorded"] is False and "nothing was recorded" in document["message"]
