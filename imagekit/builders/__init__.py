"""Building a plan's image, by either builder, and recording and pushing it.

- ``options``: what a caller may choose about one build (both builders read it);
- ``buildkit``: the engine builder, the plan rendered and built through BuildKit;
- ``assemble/``: the registry builder, the image written from its base's blobs, no engine;
- ``choice``: which of the two `imagekit build` uses for a plan;
- ``record``: the ``build``, ``rejected-build`` and ``push`` records both builders append;
- ``push``: the push of an engine-built image, and its record.

The package holds no names of its own: import from the module, so that one builder does not
load the other.
"""
