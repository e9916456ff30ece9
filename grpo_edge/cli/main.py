"""The `grpo-edge` command line: thin Typer commands that parse, build a config and call one function.

Bad input (config, files, checkpoints, targets) prints one line `error: ...` and exits with code 2.
"""
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


def main():
    try:
        app()
    except GrpoEdgeError as e:
        typer.echo("error: %s" % e, err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
