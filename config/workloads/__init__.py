"""What each trainer workload reads from its command line, declared once (config/options.py).

One job configuration per workload (`LlmJobConfig`, `VisionJobConfig`, `DdpJobConfig`), made of
one section per concern; the concerns every trainer shares (checkpoints, metrics, the global
batch, process-group timeouts) are one class each, in common.py. The trainer derives its parser
from these classes and its training loop reads their fields; a job preset (config/presets.py)
writes its trainer's arguments through a `Workload` of the same classes. No torch here: presets,
`ops` and the trainer image all import these modules.
"""
