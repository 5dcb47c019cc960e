"""`minruntime demo`: the guided run of the README (the rules, the pipeline, the layers, kube)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from minruntime.commands.common import current_settings


def demo_command(
    width: Annotated[int, typer.Option(help="Terminal width for the tables.")] = 120,
    rules_only: Annotated[
        bool, typer.Option("--rules-only", help="Only the rule engine (no Kafka/PostgreSQL).")
    ] = False,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", help="Where the audit timeline picture is written.")
    ] = Path("demo-output"),
    kube: Annotated[
        bool,
        typer.Option(
            "--kube",
            help="Only the Kubernetes loop (bridge, worker, evictor) on the API server of "
            "`stack up --kube`; about a minute.",
        ),
    ] = False,
) -> None:
    """The guided run of the README: what the service decides, and why."""
    from minruntime_dev.demo import run_demo

    demo_console = Console(width=width, highlight=False)
    if kube:
        from minruntime_dev.demo_kube import run_kube_demo

        run_kube_demo(demo_console, current_settings())
        return
    run_demo(demo_console)
    if not rules_only:
        from minruntime_dev.demo_layers import run_layers_demo
        from minruntime_dev.demo_pipeline import run_pipeline_demo

        run_pipeline_demo(demo_console, current_settings(), output_dir=output_dir)
        run_layers_demo(demo_console, current_settings())
