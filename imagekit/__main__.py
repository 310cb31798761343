"""`python -m imagekit`: the same as the `imagekit` console script."""

from imagekit.cli import entry

entry()
