"""minruntime: minimum-runtime protection and transactional requeue for GPU jobs."""

__version__ = "0.1.0"
