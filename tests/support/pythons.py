"""Real old interpreters on this machine, for the files imagekit runs inside images.

The audit's probe and the plan's assertion checker run with whatever python3 an image ships,
so their tests also run them under a real Python 3.8 and 3.9 where the machine has one
(pyenv's, or on PATH; a pyenv shim is not an interpreter). A machine with neither skips those
cases, and says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def old_pythons() -> list[str]:
    """Real Python 3.8 and 3.9 interpreters on this machine (pyenv's, or on PATH)."""
    found = []
    pyenv = Path.home() / ".pyenv" / "versions"
    for minor in ("3.8", "3.9"):
        builds = sorted(pyenv.glob(minor + ".*/bin/python")) if pyenv.is_dir() else []
        if builds:
            found.append(str(builds[-1]))
        elif (path := shutil.which("python" + minor)) and "shims" not in path:
            found.append(path)
    return found
