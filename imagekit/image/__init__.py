"""One image, wherever it is kept, below the stages that read it.

``interface`` is the image (go-containerregistry's ``v1.Image``): manifest, config, layers
and their diffIDs, one platform chosen when it is opened; ``remote`` the registry's
implementation; ``members`` what one layer holds, streamed; ``index`` each layer's index,
cached by its digest; ``view`` an image's merged filesystem asked path by path. The SBOM,
the builders' overlay guard, the base bump and the nightly comparison read images here.
"""
