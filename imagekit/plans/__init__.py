"""Plans, as `imagekit plans ...` and `imagekit render` see them: read, render, pin, bump.

- ``load``: a plan file read, validated and kept with the exact bytes it was read from,
  into ``model`` (the plan) and ``steps`` (one model a step kind), on ``fields`` (what
  they share); ``messages`` says why a plan does not validate; ``catalogue`` lists and
  validates a workspace's plans;
- ``render``: the Dockerfile and the checks' JSON a plan renders to, byte for byte, and what
  every build stages beside them; ``assert_checker``: the checker a build runs on that JSON,
  one file of standard-library Python run in the image and never imported here;
- ``pin``: each overlay's ``replaces`` hash read from the base (`plans pin-overlay`);
- ``upstream``: what a plan's ``base.found_as`` tag serves now, from one HEAD request;
- ``bump``: the overlay guards against a new base and the one-line plan edit (`plans bump`).

The package holds no names of its own: import from the module, so that reading a plan does
not load the builders.
"""
