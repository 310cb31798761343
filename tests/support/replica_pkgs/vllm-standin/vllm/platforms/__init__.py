"""STAND-IN: device platform detection, as the pinned vLLM CLI does it (not vLLM).

The pinned CLI resolves the current platform while it builds its argument parser. Without a
GPU no platform can be inferred and it raises "Failed to infer device type"; selecting
CpuPlatform through ``_current_platform`` first is the report's CPU path.
"""

import os

_current_platform = None


class UnspecifiedPlatform:
    device_type = ""


def _has_cuda_device():
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() == "":
        return False
    return os.path.exists("/dev/nvidia0")


def current_platform():
    global _current_platform
    if _current_platform is None:
        if not _has_cuda_device():
            raise RuntimeError("Failed to infer device type")
        from vllm.platforms.cuda import CudaPlatform

        _current_platform = CudaPlatform()
    return _current_platform
