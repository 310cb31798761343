"""The runtimes an image is built in or finally pulled into, each reached through one module.

- ``engine``: the Docker engine, through python-on-whales; its errors translated here;
- ``containerd``: a containerd, through its ``ctr`` client;
- ``cri``: the CRI plugin's naming rules and what a final pull proves (``FinalPullStatus``).

Beside ``imagekit.registry``, these are the outside world: no stage sees their exceptions.
"""
