"""The operator commands of the CLI (replay, protection, explain, audit, whatif).

Each module defines typer command functions over ``minruntime.audit``; ``minruntime.cli``
registers them. Heavy imports stay inside the functions, so ``minruntime --help`` is fast.
"""
