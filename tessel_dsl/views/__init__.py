"""Views of a schedule for people and tools: terminal/SVG timeline, Chrome trace, the paper's Table 3."""
