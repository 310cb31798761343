"""STAND-IN: `vllm serve` and `vllm bench serve`, argument parsing only (not vLLM).

Both subcommands build their parser from the current platform's defaults, so both fail
without a GPU unless CpuPlatform was selected first; nothing here serves a model.
"""

import argparse
import sys

from vllm import platforms


def _serve_parser(sub):
    serve = sub.add_parser("serve", help="serve a model (stand-in: parses arguments only)")
    serve.add_argument("model", nargs="?")
    serve.add_argument(
        "--block-size", type=int, default=platforms.current_platform().default_block_size
    )
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--enable-auto-tool-choice", action="store_true")
    serve.add_argument("--reasoning-parser")
    serve.add_argument("--tool-call-parser")
    serve.add_argument("--tensor-parallel-size", type=int, default=1)
    return serve


def _bench_parser(sub):
    bench = sub.add_parser("bench", help="benchmarks (stand-in: parses arguments only)")
    kinds = bench.add_subparsers(dest="bench_kind")
    serve = kinds.add_parser("serve", help="benchmark an HTTP server")
    platforms.current_platform()  # the pinned CLI resolves it here too
    serve.add_argument("--base-url")
    serve.add_argument("--dataset-name", default="random")
    serve.add_argument("--num-prompts", type=int, default=1000)
    serve.add_argument("--max-concurrency", type=int)
    serve.add_argument("--request-rate", type=float, default=float("inf"))
    return bench


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--help=all` is vLLM's spelling for the whole help; argparse knows only --help.
    argv = ["--help" if a == "--help=all" else a for a in argv]
    parser = argparse.ArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="command")
    _serve_parser(sub)
    _bench_parser(sub)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
