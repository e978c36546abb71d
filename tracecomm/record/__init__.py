"""Recording a run that ``tracecomm analyze`` reads well: ``tracecomm.profile`` for a training
loop (``record.recorder``), the NCCL / Flight Recorder environment (``record.files``) and GPU
power sampling (``record.power``). torch is imported only when a recorder starts."""

from tracecomm.record.files import recording_environment
from tracecomm.record.recorder import TRIGGER_FILE, Recorder, profile

__all__ = ["TRIGGER_FILE", "Recorder", "profile", "recording_environment"]
