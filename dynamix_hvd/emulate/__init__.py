"""Emulated heterogeneous cluster on one machine: scenario files (``scenario``), the device
speed/memory model with timed events (``device``), network namespaces + tc links
(``netns``), the per-rank training script (``worker``) and ``dynamix bench`` (``bench``)."""
