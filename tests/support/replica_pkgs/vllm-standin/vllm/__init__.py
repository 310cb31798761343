"""STAND-IN for vLLM, made by imagekit for its seed replicas; this is not vLLM.

Only the serving CLI's device inference is reproduced (see vllm.platforms): enough for the
vllm audit profile's CLI probes and their CpuPlatform fallback to meet what the MiniMax-M3
report met in the pinned image. The real wheel needs several GB of CUDA torch.
"""

__version__ = "0.0.0+imagekit.standin"
STANDIN = True
