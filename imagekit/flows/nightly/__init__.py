"""`imagekit nightly`: watch each plan's upstream base tag, rebuild, say loudly what moved.

Two things drift under a plan that pins its base by digest, and a night looks at both.

**The base tag upstream.** For a plan with ``base.found_as`` the tag is asked on the base's
registry (imagekit.plans.upstream: a HEAD request, the digest as the registry serves it, and a
GET of the tag whose bytes confirm any "nothing moved") and held against the pin:

- it serves the pin: nothing upstream moved (with ``watch_only`` the night ends there for
  the plan, ``base-current``, having cost that HEAD and GET);
- it serves another digest: every overlay guard is checked against the new base first
  (imagekit.builders.bump, the registry builder's guard: no pull). A guard that no longer holds is
  ``overlay-drift`` with the path and both hashes, and no candidate is built or pushed.
  Otherwise a candidate is built on the new digest (through the registry for a plan of
  overlays and metadata, which costs seconds and no pull; through the engine for a plan
  with pip or package steps), audited, compared with the accepted image, and the pinned
  base is compared with the new one (what upstream changed). The plan change is proposed
  as a unified diff of manifests/NAME.yaml (one line: the digest), kept as evidence, and
  for a candidate that is ready also written to ``proposals_dir`` and, with
  ``write_plans``, applied. The verdict is ``base-moved`` (a candidate is ready) or
  ``audit-worse``;
- it is gone (HTTP 404): ``base-tag-gone``.

**The package index.** A plan whose tag did not move (or that has none) is rebuilt from
its pinned base without cache, audited again, pushed as a candidate beside the accepted
image (or to ``candidate_registry``) and compared with the last accepted image of that
plan in the ledger (the image a complete pipeline pulled at its end; failing that, the
last one pushed that was not a night's candidate). Both are read from the registry layer
by layer (imagekit.layerdiff): the same diffIDs are ``reproducible``; the same contents but
for timestamps and bytecode caches ``equivalent``; anything else ``changed``, with the
distributions added, removed or at another version and the files changed, named.

A change is reported, not failed: it may be wanted. What fails the night (exit 1): an
overlay that drifted upstream, a vanished base tag, a preflight (`imagekit doctor`) that
says no, an audit worse than the accepted one, a plan with nothing accepted to compare with,
and ``rejected``: a build whose guards or assertions reject it, or one whose record the
ledger refuses (imagekit.errors.RecordRefused: the build finished, but an image the ledger
does not vouch for is no candidate; it is removed like any other, and named). A night's
note the ledger refuses turns a passing verdict into ``rejected`` too, its detail kept.
What ends it with exit 3: a registry that cannot be reached (a 503 is retried by the
registry transport first), a stage that could not finish. Every plan is tried even when an
earlier one failed, and each night appends one ``note`` record a plan, its details typed
(imagekit.ledger.record.NightlyDetails).

The package, by concern: ``run`` (every plan, one night each: watched or rebuilt), ``watch``
(a base tag that moved: guard, compare, build, propose), ``rebuild`` (the pinned base built
again), ``candidate`` (the builder a candidate takes, built, pushed, audited, compared),
``night`` (one plan's night: its accepted image, evidence and note record), ``options``,
``result`` (a plan's verdict, and the words a comparison is told in) and ``report`` (the
whole night: its exit code, JSON, lines and job summary). Which image is the
accepted one is the ledger's to say (imagekit.ledger.accepted), as it is for the lock.
"""
