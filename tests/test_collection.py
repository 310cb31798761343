"""The suite collects the test folders that mirror imagekit/builders/.

pytest skips a folder whose name matches ``norecursedirs``, and a folder named ``build`` was
once skipped that way (48 tests silently dropped); the builders' package and its tests are
named ``builders`` since, and this test fails if a layout change or an ini setting would
drop them again.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("folder", ["unit/builders", "integration/builders"])
def test_the_builders_test_folders_are_collected(folder: str, pytestconfig: pytest.Config) -> None:
    assert (TESTS / folder).is_dir()
    skipped = [str(p) for p in pytestconfig.getini("norecursedirs")]
    name = Path(folder).name
    assert not any(fnmatch(name, pattern) for pattern in skipped), (
        f"tests/{folder} would not be collected: {skipped}"
    )


def test_the_check_sees_a_folder_pytest_would_skip(pytestconfig: pytest.Config) -> None:
    skipped = [str(p) for p in pytestconfig.getini("norecursedirs")]
    assert any(fnmatch(".venv", pattern) for pattern in skipped)
