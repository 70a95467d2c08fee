"""What a CPU run's host time holds that a GPU host's would not: perfaudit's own recording cost (overhead.py) and
the CPU allocator's frees of what a GPU's caching allocator keeps (frees.py); taken out before the replay."""
