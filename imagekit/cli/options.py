"""The options more than one command takes, spelt once, and ``parsed``, which hands a
command's parsed options to its stage by name.

The option types and decorators here (--json, the path types, the vulnerability database,
the BuildKit builders, --sign-key, the registry's TLS and mirrors) give every command the same
spelling and help. ``parsed`` fills a stage's parameters from the options of the same name and
checks each value against its annotation, so an option wired to the wrong parameter is a crash
at once, never a wrong value deep in a stage.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, cast

import click

from imagekit.cli.output import echo_err

T = TypeVar("T")


#: The path types of options and arguments: a file (never a folder), a folder (never a
#: file), either; each parses to a pathlib.Path.
FILE_PATH = click.Path(dir_okay=False, path_type=Path)
DIR_PATH = click.Path(file_okay=False, path_type=Path)
ANY_PATH = click.Path(path_type=Path)

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout."
)


def _with_options(
    command: Callable[..., Any], options: Iterable[Callable[[Callable[..., Any]], Any]]
) -> Callable[..., Any]:
    """``command`` with each click option applied, listed in ``--help`` in the order given."""
    wrapped = command
    for option in reversed(tuple(options)):
        wrapped = option(wrapped)
    return wrapped


def vuln_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--vuln-db, --vuln-db-max-age and --fail-on, spelt alike wherever an audit runs, and
    handed to the command as the one ``vulns: VulnPolicy`` an audit takes."""
    from imagekit.audit.vulns import DEFAULT_MAX_AGE_DAYS, FailOn, VulnPolicy

    @functools.wraps(command)
    def with_policy(
        *args: Any, vuln_db: Path | None, max_age: int, fail_on: FailOn, **kw: Any
    ) -> Any:
        return command(*args, vulns=VulnPolicy(vuln_db, max_age, fail_on), **kw)

    options = (
        click.option(
            "--vuln-db",
            type=ANY_PATH,
            envvar="IMAGEKIT_VULN_DB",
            metavar="PATH",
            help="An offline OSV export for PyPI (OSV's all.zip, or a folder of its JSON "
            "records) to match against instead of the service [env: IMAGEKIT_VULN_DB].",
        ),
        click.option(
            "--vuln-db-max-age",
            "max_age",
            type=click.IntRange(min=0),
            default=DEFAULT_MAX_AGE_DAYS,
            show_default=True,
            metavar="DAYS",
            help="A database older than this says unknown, never clean.",
        ),
        click.option(
            "--fail-on",
            type=click.Choice(["findings", "fixable", "never"]),
            default="findings",
            show_default=True,
            help="Which findings fail the audit (exit 1): any, those with a fixed version, "
            "or none.",
        ),
    )
    return _with_options(with_policy, options)


def cluster_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--kubeconfig, --context and --namespace, as kubectl spells them, handed to the command
    as the one ``target: ClusterTarget`` (imagekit.cluster.connection says how it is found)."""
    from imagekit.cluster.connection import ClusterTarget

    @functools.wraps(command)
    def with_target(
        *args: Any, kubeconfig: Path | None, context: str | None, namespace: str | None, **kw: Any
    ) -> Any:
        return command(*args, target=ClusterTarget(kubeconfig, context, namespace), **kw)

    options = (
        click.option(
            "--kubeconfig",
            type=ANY_PATH,
            metavar="FILE",
            help="The kubeconfig (default: $KUBECONFIG, else ~/.kube/config, else the pod's "
            "service account).",
        ),
        click.option(
            "--context", metavar="NAME", help="The kubeconfig context (default: current)."
        ),
        click.option(
            "--namespace", "-n", metavar="NAME", help="The namespace (default: the context's)."
        ),
    )
    return _with_options(with_target, options)


def builder_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--buildkit ADDR (with its TLS files), --buildx-builder NAME and --cache-ref REF,
    spelt alike by every command that builds (``build``, ``nightly``): the build goes to a
    BuildKit of its own (imagekit.builders.remote), no engine on the path. The command does not
    take them: it hands them on with :func:`parsed`, which reads them from the click context
    into the stage's options (``BuildOptions``, ``NightOptions``)."""

    @functools.wraps(command)
    def handed_on(
        *args: Any,
        buildkit: str | None,
        buildkit_ca: Path | None,
        buildkit_cert: Path | None,
        buildkit_key: Path | None,
        buildx_builder: str | None,
        cache_ref: str | None,
        **kw: Any,
    ) -> Any:
        return command(*args, **kw)

    options = (
        click.option(
            "--buildkit",
            metavar="ADDR",
            help="Build on this BuildKit daemon (tcp://HOST:PORT or unix:///PATH), no engine; "
            "BuildKit pushes by digest.",
        ),
        click.option(
            "--buildkit-ca", type=ANY_PATH, help="CA certificate of the --buildkit daemon."
        ),
        click.option("--buildkit-cert", type=ANY_PATH, help="Client certificate for --buildkit."),
        click.option("--buildkit-key", type=ANY_PATH, help="Client key for --buildkit."),
        click.option(
            "--buildx-builder",
            metavar="NAME",
            help="Build on this buildx builder (remote, kubernetes, docker-container driver) as "
            "with --buildkit: no engine, pushed by digest.",
        ),
        click.option(
            "--cache-ref",
            metavar="REF",
            help="With --buildkit/--buildx-builder: import BuildKit's cache from and export it "
            "to REF in a registry (type=registry, mode=max).",
        ),
    )
    return _with_options(handed_on, options)


def sign_key_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--sign-key FILE (or IMAGEKIT_SIGNING_KEY), the one way every stage is asked to attest;
    ``what`` says what that stage signs and where it goes."""
    return click.option(
        "--sign-key",
        type=FILE_PATH,
        envvar="IMAGEKIT_SIGNING_KEY",
        metavar="FILE",
        help=f"{what} Env: IMAGEKIT_SIGNING_KEY.",
    )


def trusted_key_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--key PUB, repeatable: the public keys whose signatures a command trusts (``verify``,
    ``ledger sync``); ``help`` says what it trusts them for."""
    return click.option(
        "--key", "key_paths", multiple=True, type=FILE_PATH, metavar="PUB", help=help
    )


def registry_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--insecure HOST, --ca-file PATH and --registry-mirror URL, one story for every command
    that reaches a registry (imagekit.registry.tls, imagekit.registry.mirrors): they hold for
    every registry client the command makes, with Docker's certs.d, the engine's and
    containerd's mirrors and the IMAGEKIT_* variables beside them; which mirror served a
    read, and every fallback, is said on stderr."""
    from imagekit.registry.tls import CA_FILE_ENV, CERTS_D_ENV, INSECURE_ENV

    @functools.wraps(command)
    def with_settings(
        *args: Any,
        insecure: tuple[str, ...],
        ca_file: Path | None,
        registry_mirror: tuple[str, ...],
        **kw: Any,
    ) -> Any:
        from imagekit.registry.mirrors import use_mirrors
        from imagekit.registry.tls import use_settings

        with (
            use_settings(insecure=insecure, ca_file=ca_file),
            use_mirrors(registry_mirror, say=echo_err),
        ):
            return command(*args, **kw)

    options = (
        click.option(
            "--insecure",
            multiple=True,
            metavar="HOST",
            help="A registry to reach as Docker's insecure-registries are: TLS without "
            "verifying its certificate, plain HTTP if it speaks no TLS; repeatable "
            f"[env: {INSECURE_ENV}, comma-separated].",
        ),
        click.option(
            "--ca-file",
            type=FILE_PATH,
            envvar=CA_FILE_ENV,
            metavar="PATH",
            help="A CA bundle (PEM) to trust for registries, beside the system's and "
            f"/etc/docker/certs.d/HOST/ca.crt [env: {CA_FILE_ENV}; ${CERTS_D_ENV} moves "
            "certs.d].",
        ),
        click.option(
            "--registry-mirror",
            multiple=True,
            metavar="URL",
            help="A Docker Hub mirror to read docker.io through before registry-1.docker.io; "
            "repeatable, beside the engine's registry-mirrors and containerd's hosts.toml "
            "[env: IMAGEKIT_REGISTRY_MIRRORS].",
        ),
    )
    return _with_options(with_settings, options)


def parsed(target: Callable[..., T], /, *args: object, **given: object) -> T:
    """Call ``target`` (a stage, or an options dataclass) with the command's parsed options.

    Each parameter of ``target`` that ``args`` and ``given`` leave open takes the click
    parameter of the same name, where the command has one, so a command does not list every
    option a second time to hand it on; ``given`` holds those spelt otherwise or converted on
    the way (``assertions=not no_assertions``). Every value is checked against the annotation
    of the parameter it fills: an option wired to the wrong parameter, or a name ``target``
    does not take, is a crash at once (a bug), never a wrong value deep in a stage.
    """
    options = click.get_current_context().params
    signature = inspect.signature(target)
    taken = set(list(signature.parameters)[: len(args)]) | set(given)
    filled = {
        name: options[name]
        for name in signature.parameters
        if name not in taken and name in options
    }
    bound = signature.bind(*args, **given, **filled)
    hints = typing.get_type_hints(target)
    for name, value in bound.arguments.items():
        if name in hints and not _conforms(value, hints[name]):
            where = getattr(target, "__qualname__", target)
            raise TypeError(f"{where}: {name}={value!r} is not {hints[name]}")
    return target(*bound.args, **bound.kwargs)


def _conforms(value: object, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type (the forms a command's options take)."""
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_conforms(value, argument) for argument in arguments)
    if origin is Literal:
        return value in arguments
    if origin in (tuple, list):
        if not isinstance(value, origin) or not arguments:
            return isinstance(value, origin)
        if origin is tuple and not (len(arguments) == 2 and arguments[1] is Ellipsis):
            raise TypeError(f"no check for {hint} (only tuple[X, ...])")
        return all(_conforms(item, arguments[0]) for item in cast("Iterable[object]", value))
    if hint is float:  # an int is a float, as type checkers take it
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    raise TypeError(f"no check for {hint}")
