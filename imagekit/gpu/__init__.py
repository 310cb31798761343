"""The GPU half: the image's preflight on the GPU node that will serve it.

``probe`` runs where the GPUs are (one file: the standard library and the image's torch),
``launch`` starts it under torch's own launcher on this host or in the image, ``report``
reads its report back strictly and decides the verdict from its numbers (``judges``: what a
judge is; ``checks``: the core checks' judges), ``bind`` ties a report to the pod or host
that made it, ``job`` is the Kubernetes Job that runs it on a cluster, and ``stage`` is
`imagekit gpu-preflight`: run, decide, record, then sign. The kind of its
records and attestations is imagekit.kinds.gpu_preflight. docs/gpu-preflight.md.
"""
