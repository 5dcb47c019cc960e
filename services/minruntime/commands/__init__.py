"""Every command of the CLI, one function each, in modules named by domain.

``minruntime.cli`` only maps names to them. They read this invocation's settings through
``commands.common.current_settings``. Heavy imports stay inside the functions, so
``minruntime --help`` is fast.
"""
