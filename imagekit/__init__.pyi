# The public face of imagekit: the one list of the names `import imagekit` offers.
#
# Type checkers read this file; imagekit/__init__.py reads it too, at import, to hand each
# name out lazily from the module named here (and to make __all__, in this order). A name
# is public when it is imported here with `as` its own public name; docs/API.md shows each.
from imagekit.api import audit_image as audit_image
from imagekit.api import build_image as build_image
from imagekit.api import final_pull as final_pull
from imagekit.api import gpu_preflight as gpu_preflight
from imagekit.api import inspect_image as inspect_image
from imagekit.api import load_plan as load_plan
from imagekit.api import verify_mirror as verify_mirror
from imagekit.audit.stage import AuditRequest as AuditRequest
from imagekit.audit.stage import AuditResult as AuditResult
from imagekit.builders.built import BuiltImage as BuiltImage
from imagekit.builders.options import BuildOptions as BuildOptions
from imagekit.errors import AuditTimeout as AuditTimeout
from imagekit.errors import BuildFailed as BuildFailed
from imagekit.errors import CheckFailed as CheckFailed
from imagekit.errors import CouldNotFinish as CouldNotFinish
from imagekit.errors import ImagekitError as ImagekitError
from imagekit.errors import RecordRefused as RecordRefused
from imagekit.errors import UsageError as UsageError
from imagekit.gate.verify import GateResult as GateResult
from imagekit.gate.verify import verify_image as verify_image
from imagekit.gpu.launch import Expectations as Expectations
from imagekit.gpu.launch import ProbeOptions as ProbeOptions
from imagekit.gpu.stage import PreflightRequest as PreflightRequest
from imagekit.gpu.stage import PreflightResult as PreflightResult
from imagekit.kinds.audit import AuditStatus as AuditStatus
from imagekit.kinds.gpu_preflight import GpuPreflightStatus as GpuPreflightStatus
from imagekit.kinds.mirror import MirrorVerdict as MirrorVerdict
from imagekit.ledger.ledger import Ledger as Ledger
from imagekit.ledger.record import LedgerRecord as LedgerRecord
from imagekit.ledger.verify import VerifyReport as VerifyReport
from imagekit.mirror import MirrorOptions as MirrorOptions
from imagekit.mirror import MirrorReport as MirrorReport
from imagekit.plans.model import LoadedPlan as LoadedPlan
from imagekit.pull import PullResult as PullResult
from imagekit.refs import Platform as Platform
from imagekit.registry.resolve import ResolvedImage as ResolvedImage
from imagekit.version import __version__ as __version__
from imagekit.workspace import Workspace as Workspace

__all__: list[str]
