"""The host's time on a GPU's machine against a CPU run's: what a CPU run's holds that a GPU host's would not,
perfaudit's own recording cost (overhead.py) and the CPU allocator's frees of what a GPU's caching allocator keeps
(frees.py), taken out before the replay; and what a GPU host does that a CPU run did not, cuDNN's benchmark
searches (cudnn_search.py), put in."""
