"""STAND-IN: the CPU platform an HTTP-only client (or a parser check) may select (not vLLM)."""


class CpuPlatform:
    device_type = "cpu"
    default_block_size = 128
