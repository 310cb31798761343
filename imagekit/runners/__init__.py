"""Where a probe runs: one seam (``seam.py``), one implementation a place (``host.py``,
``engine.py``, ``containerd.py``; a Kubernetes pod in imagekit.cluster.runner)."""
