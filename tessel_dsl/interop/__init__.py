"""Other formats in and out: PyTorch's pipeline CSV schedules, and `.tsl` with profiled costs."""
