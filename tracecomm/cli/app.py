"""The typer application every command registers on, and the conventions of the command line:
``-h`` beside ``--help``, help that shows metavars (never type names) and its brackets as
written, and one error style (``tracecomm: error: …``, one line, exit 2) for usage errors too.
"""

from __future__ import annotations

import copy
import importlib
import sys
from types import ModuleType
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from tracecomm._version import __version__
from tracecomm.cli.exits import EXIT_USAGE, stderr

HELP_NAMES = ["-h", "--help"]


def _quiet_help_option(option: Any) -> Any:
    if option is not None:
        option.metavar = ""  # a flag takes no value: no "<bool>" beside it
    return option


class Command(TyperCommand):
    def get_help_option(self, ctx: Any) -> Any:
        return _quiet_help_option(super().get_help_option(ctx))

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)
        for param in params:
            if getattr(param, "param_type_name", "") == "argument":
                # its metavar (RUN...) says what to write; "<list[str]>" says nothing more
                param.display_type_rich = lambda ctx: None  # typer 0.29's help
                if hasattr(param, "type"):  # earlier releases' help (0.29 has no type)
                    param.type = _quiet_type(param.type)
                usage = _usage_name(param)
                param.get_usage_pieces = lambda ctx, usage=usage: [usage()]  # the usage line
        return params


def _quiet_type(kind: Any) -> Any:
    """A copy of an argument's type (click's are shared instances) whose help metavar is
    empty: typer before 0.29 prints ``<str>`` / ``<path>`` beside an argument otherwise."""
    if getattr(kind, "_tracecomm_quiet", False):
        return kind
    quiet = copy.copy(kind)
    quiet.get_metavar = lambda *args, **kwargs: ""
    quiet._tracecomm_quiet = True
    return quiet


def _usage_name(param: Any) -> Any:
    """``RUN...`` in the usage line (``[RUN]`` when optional), as the help names it."""
    name = str(param.metavar or param.name or "ARG").upper()
    name = name if param.required else f"[{name}]"
    return lambda: name + ("..." if param.nargs != 1 else "")


class Commands(TyperGroup):
    def get_help_option(self, ctx: Any) -> Any:
        return _quiet_help_option(super().get_help_option(ctx))

    def main(  # type: ignore[override]
        self, args: Any = None, prog_name: Any = None, standalone_mode: bool = True, **extra: Any
    ) -> Any:
        """Click's usage errors (an unknown option, a missing argument, a bad choice) in the
        tool's one style: ``tracecomm: error: <what> (see tracecomm <command> -h)``."""
        errors = _click_exceptions()
        # click 8.2+ raises NoArgsIsHelpError once the help is printed; click 8.0 and 8.1 (which
        # typer 0.19 allows) exit 0 instead. An empty tuple in an except clause catches nothing.
        no_args_error = getattr(errors, "NoArgsIsHelpError", ())
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
            if no_args_error == () and not (sys.argv[1:] if args is None else args):
                code = EXIT_USAGE  # the help was printed, as below
        except no_args_error:  # the help was printed: that is the answer
            code = EXIT_USAGE
        except errors.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "tracecomm"
            stderr(f"error: {_one_line(exc.format_message())} (see {command} -h)")
            code = EXIT_USAGE
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def _click_exceptions() -> ModuleType:
    """The exceptions of the click that typer runs on: typer 0.26 and later carry their own copy
    (``typer._click``) and raise its classes; earlier releases depend on the click package (so
    it is installed wherever they are) and raise click's."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ModuleNotFoundError:
        return importlib.import_module("click.exceptions")


def _one_line(message: str) -> str:
    return " ".join(message.split())


app = typer.Typer(
    name="tracecomm",
    help="Why is a distributed training run slower than its GPUs? Reads PyTorch profiler "
    "(Kineto) traces and reports compute / communication overlap, exposed collectives and idle "
    "time per rank, and what to try first. Every figure is defined in metrics.md "
    "(`tracecomm docs metrics`).",
    cls=Commands,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": HELP_NAMES},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracecomm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, metavar="", help="Print the version."
        ),
    ] = False,
) -> None:
    """tracecomm: compute / communication analysis of distributed training traces."""
