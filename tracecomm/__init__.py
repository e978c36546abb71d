"""tracecomm: why a distributed training run is slower than its GPUs."""

__version__ = "0.1.0"
