"""The GPU half: the image's preflight on the GPU node that will serve it.

``probe`` runs where the GPUs are (one file: the standard library and the image's torch),
``launch`` starts it under torch's own launcher on this host or in the image, ``report``
reads its report back and decides the verdict, ``job`` is the Kubernetes Job that runs it
on a cluster, and ``stage`` is `imagekit gpu-preflight`: run, record, sign. The kind of its
records and attestations is imagekit.kinds.gpu_preflight. docs/gpu-preflight.md.
"""
