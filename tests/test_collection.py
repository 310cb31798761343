"""The suite collects the test folders that mirror imagekit/builders/.

pytest skips any folder named ``build`` unless ``norecursedirs`` says otherwise, and a
layout change once silently dropped 48 tests that way; this test fails if it happens again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("folder", ["unit/build", "integration/build"])
def test_the_build_test_folders_are_collected(folder: str, pytestconfig: pytest.Config) -> None:
    assert (TESTS / folder).is_dir()
    skipped = pytestconfig.getini("norecursedirs")
    assert "build" not in skipped, f"tests/{folder} would not be collected: {skipped}"
