"""STAND-IN: the CUDA platform, chosen only where a GPU device is visible (not vLLM)."""


class CudaPlatform:
    device_type = "cuda"
    default_block_size = 16
