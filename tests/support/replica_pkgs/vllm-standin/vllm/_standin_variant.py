"""STAND-IN: what this build of the stand-in leaves out (not vLLM).

Empty in the replica. tests/support/replicas.py builds a variant wheel of the stand-in with
benchmark flags named here, an older benchmark client as an image may carry: the vllm
profile must then turn the audit CPU_CHECK_INCOMPLETE naming them.
"""

WITHOUT_BENCH_FLAGS = ()
