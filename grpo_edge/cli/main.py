"""The `grpo-edge` command line: thin Typer commands that parse, build a config and call one function.

Bad input (config, files, checkpoints, targets) prints one line `error: ...` and exits with code 2.
"""
import errno
import os
import sys

import typer

from grpo_edge.errors import GrpoEdgeError

app = typer.Typer(name="grpo-edge", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Train small models with GRPO and ship them to edge devices (ESP32, Raspberry Pi, Jetson).")


def _register():
    from grpo_edge.cli import deploy, train
    train.register(app)
    deploy.register(app)


_register()


def _usage_errors():
    """Click's exception base classes (typer may vendor its own click)."""
    import click
    return tuple({click.ClickException, getattr(typer, "TyperException", click.ClickException)})


def _command():
    """The click command of `app`, with boolean flags shown as flags: typer's help prints `--resume <bool>`, which
    reads as if the flag took a value."""
    cmd = typer.main.get_command(app)

    def flags_without_metavar(c):
        for p in getattr(c, "params", ()):
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""

        def help_option(ctx, made=c.get_help_option):      # --help is made per call
            opt = made(ctx)
            if opt is not None:
                opt.metavar = ""
            return opt
        c.get_help_option = help_option
        for sub in getattr(c, "commands", {}).values():
            flags_without_metavar(sub)
    flags_without_metavar(cmd)
    return cmd


def _run():
    try:
        rv = _command().main(standalone_mode=False, prog_name="grpo-edge")   # usage errors come here: one line each
    except GrpoEdgeError as e:
        typer.echo("error: %s" % e, err=True)
        return getattr(e, "exit_code", 2)        # 2: bad input; 3: a deploy below its quality gate
    except _usage_errors() as e:
        from grpo_edge.cli.errors import usage2line
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            typer.echo(ctx.get_help(), err=True)
        else:
            typer.echo("error: %s" % usage2line(e), err=True)
        return 2
    except (KeyboardInterrupt, typer.Abort):
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        typer.echo("interrupted", err=True)
        return 130
    except OSError as e:
        from grpo_edge.cli.errors import oserror2line
        typer.echo("error: %s" % oserror2line(e), err=True)
        return 1 if e.errno == errno.EPIPE else 2
    return rv if isinstance(rv, int) else 0


def main():
    code = _run()
    if "torch.distributed" in sys.modules:
        from grpo_edge.core import distributed
        if distributed.leave():
            # torch 2.13 keeps a process group (and gloo's threads) alive past destroy_process_group once
            # torch._dynamo was imported after the group was made; the interpreter's exit then aborted
            # ('terminate called without an active exception', 7 of 40 torchrun runs). grpo_edge/sizes.py no
            # longer imports it, a user's reward or model code still may: a rank that was in a group ends
            # without running the C++ exit-time destructors
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
