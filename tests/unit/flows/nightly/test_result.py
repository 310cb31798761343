"""The night's sentences count as people do."""

from __future__ import annotations

from imagekit.flows.nightly.result import _all_equal


def test_one_diffid_is_not_all_1() -> None:
    assert _all_equal(1) == "its one diffID equal"
    assert _all_equal(3) == "all 3 diffIDs equal"
