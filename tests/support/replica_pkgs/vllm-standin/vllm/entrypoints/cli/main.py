"""STAND-IN: `vllm serve` and `vllm bench serve`, argument parsing only (not vLLM).

Both subcommands build their parser from the current platform's defaults, so both fail
without a GPU unless CpuPlatform was selected first; nothing here serves a model.

Help is vLLM's: plain ``--help`` prints the usage, the positional arguments and the names of
the argument groups with a tip, not the flags; ``--help=all`` prints every flag;
``--help=GROUP`` one group, ``--help=listgroup`` the group names, ``--help=WORD`` the flags
whose name contains WORD. vllm._standin_variant.WITHOUT_BENCH_FLAGS names benchmark flags
this build leaves out (empty here; tests build a variant wheel that sets it).
"""

import argparse
import sys

from vllm import _standin_variant, platforms

TIP = (
    "Tip: use `vllm {cmd} --help=<keyword>` to explore arguments from help.\n"
    "   - To view an argument group:    --help=ModelConfig\n"
    "   - To view a single argument:    --help=max-num-seqs\n"
    "   - To search by keyword:         --help=max\n"
    "   - To list all groups:           --help=listgroup\n"
    "   - To view every argument:       --help=all\n"
)


class _GroupedHelp(argparse.Action):
    """vLLM's --help[=KEYWORD]: grouped summary by default, everything only for =all."""

    def __init__(self, option_strings, dest, **kwargs):
        kwargs.update(nargs="?", const="", default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        keyword = values or ""
        groups = [
            g
            for g in parser._action_groups
            if g.title != "positional arguments" and g._group_actions
        ]
        if keyword == "all":
            parser.print_help()
        elif keyword == "":
            # The summary: usage, positionals, group names; never the flags themselves.
            out = [parser.format_usage(), "\n", (parser.description or "") + "\n\n"]
            positionals = parser._positionals._group_actions
            if positionals:
                out.append("positional arguments:\n")
                out.extend(f"  {a.dest:<22} {a.help or ''}\n" for a in positionals)
                out.append("\n")
            out.append("Config Groups:\n")
            out.extend(f"  {group.title}\n" for group in groups)
            out.append("\n" + TIP.format(cmd=parser.prog.split(" ", 1)[1]))
            sys.stdout.write("".join(out))
        elif keyword == "listgroup":
            sys.stdout.write("".join(f"{g.title}\n" for g in groups))
        else:
            matched = [g for g in groups if g.title.lower() == keyword.lower()]
            if matched:
                formatter = parser._get_formatter()
                for group in matched:
                    formatter.start_section(group.title)
                    formatter.add_arguments(group._group_actions)
                    formatter.end_section()
                sys.stdout.write(formatter.format_help())
            else:
                found = [
                    opt
                    for action in parser._actions
                    for opt in action.option_strings
                    if keyword.lower().strip("-") in opt.lower()
                ]
                if not found:
                    sys.stdout.write(f"No group or arguments matching {keyword!r}\n")
                    parser.exit(1)
                sys.stdout.write("".join(f"{f}\n" for f in found))
        parser.exit()


def _parser(sub, name, usage, description):
    parser = sub.add_parser(
        name, help=description, usage=usage, description=description, add_help=False
    )
    parser.add_argument("--help", action=_GroupedHelp, help="show help (--help=all: every flag)")
    return parser


def _serve_parser(sub):
    serve = _parser(
        sub,
        "serve",
        "vllm serve [model_tag] [options]",
        "Start the vLLM OpenAI Compatible API server (stand-in: parses arguments only).",
    )
    serve.add_argument("model_tag", nargs="?", help="the model tag to serve")
    model = serve.add_argument_group("ModelConfig")
    model.add_argument("--max-model-len", type=int, help="model context length")
    model.add_argument("--trust-remote-code", action="store_true")
    cache = serve.add_argument_group("CacheConfig")
    cache.add_argument(
        "--block-size", type=int, default=platforms.current_platform().default_block_size
    )
    parallel = serve.add_argument_group("ParallelConfig")
    parallel.add_argument("--tensor-parallel-size", type=int, default=1)
    frontend = serve.add_argument_group("Frontend")
    frontend.add_argument("--enable-auto-tool-choice", action="store_true")
    frontend.add_argument("--tool-call-parser")
    structured = serve.add_argument_group("StructuredOutputsConfig")
    structured.add_argument("--reasoning-parser")
    return serve


_BENCH_FLAGS = (
    ("options", "--base-url", {}),
    ("options", "--num-prompts", {"type": int, "default": 1000}),
    ("options", "--num-warmups", {"type": int, "default": 0}),
    ("options", "--max-concurrency", {"type": int}),
    ("options", "--request-rate", {"type": float, "default": float("inf")}),
    ("options", "--request-id-prefix", {"default": "bench-"}),
    ("options", "--ignore-eos", {"action": "store_true"}),
    ("options", "--save-detailed", {"action": "store_true"}),
    ("options", "--metadata", {"nargs": "*"}),
    ("options", "--metric-percentiles", {"default": "99"}),
    ("dataset options", "--dataset-name", {"default": "random"}),
    ("random dataset options", "--random-input-len", {"type": int, "default": 1024}),
    ("random dataset options", "--random-output-len", {"type": int, "default": 128}),
)


def _bench_parser(sub):
    bench = sub.add_parser("bench", help="benchmarks (stand-in: parses arguments only)")
    kinds = bench.add_subparsers(dest="bench_kind")
    serve = _parser(
        kinds,
        "serve",
        "vllm bench serve [options]",
        "Benchmark the online serving throughput (stand-in: parses arguments only).",
    )
    platforms.current_platform()  # the pinned CLI resolves it here too
    groups = {}
    for title, flag, kwargs in _BENCH_FLAGS:
        if flag in _standin_variant.WITHOUT_BENCH_FLAGS:
            continue
        if title == "options":  # argparse's own group of optional arguments
            serve.add_argument(flag, **kwargs)
            continue
        if title not in groups:
            groups[title] = serve.add_argument_group(title)
        groups[title].add_argument(flag, **kwargs)
    return bench


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
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
