"""The emulated device's memory: one step's allocations as a GPU makes them (device_memory.py), replayed through
a model of c10's CUDA caching allocator (caching_allocator.py)."""
