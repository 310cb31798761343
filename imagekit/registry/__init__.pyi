# The public face of imagekit.registry: the one list of the names it offers.
#
# Type checkers read this file; imagekit/registry/__init__.py reads it too, at import, to hand
# each name out lazily from the module named here (imagekit.lazy).
from imagekit.registry.client import RegistryClient as RegistryClient
from imagekit.registry.documents import ManifestHead as ManifestHead
from imagekit.registry.manifest import ACCEPT as ACCEPT
from imagekit.registry.manifest import INDEX_TYPES as INDEX_TYPES
from imagekit.registry.manifest import MANIFEST_TYPES as MANIFEST_TYPES
from imagekit.registry.manifest import Descriptor as Descriptor
from imagekit.registry.manifest import ImageConfig as ImageConfig
from imagekit.registry.manifest import ImageIndex as ImageIndex
from imagekit.registry.manifest import ImageManifest as ImageManifest
from imagekit.registry.resolve import DEFAULT_PLATFORM as DEFAULT_PLATFORM
from imagekit.registry.resolve import ResolvedImage as ResolvedImage
from imagekit.registry.resolve import select_platform as select_platform
from imagekit.registry.retry import RetryPolicy as RetryPolicy
from imagekit.registry.transport import is_loopback as is_loopback
