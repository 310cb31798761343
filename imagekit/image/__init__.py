"""One image, wherever it is kept, below the stages that read it.

``interface`` is the image (go-containerregistry's ``v1.Image``): manifest, config, layers
and their diffIDs, one platform chosen when it is opened, and ``LayerSource``, the part of it
a comparison reads. Its implementations, as ``v1.Image``'s are remote, layout and daemon:
``remote`` a registry's, ``layout`` an OCI layout's, ``engine`` the engine's (through `docker
save`, a LayerSource only: the engine keeps no manifest of an image it built). ``layer`` one
layer streamed once; ``members`` what a layer holds, streamed; ``index`` each layer's index,
cached by its digest; ``view`` an image's merged filesystem asked path by path. The SBOM,
the builders' overlay guard, the base bump and the nightly comparison read images here.
"""
