"""imagekit: build, audit, mirror and record the container images that serve large models.

The public face: the names imported in ``imagekit/__init__.pyi``, the one list of them. Type
checkers read that stub; at import this module reads it too (a few dozen lines, parsed with
``ast``) and hands each name out on first use (PEP 562), so that ``import imagekit`` (and so
the CLI's start-up) loads no stage; imagekit.lazy does the reading. ``__all__`` is the
stub's names, sorted (by code point). docs/API.md shows each with an example; everything else
under ``imagekit.`` is internal and may move.
"""

from __future__ import annotations

from imagekit.lazy import lazy_face
from imagekit.version import __version__ as __version__

__all__, __getattr__, __dir__ = lazy_face(globals())
