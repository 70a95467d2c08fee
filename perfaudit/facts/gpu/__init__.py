"""GPU-side facts: kernels and what they are, busy and idle time per step, syncs, host-to-device
copies, the links from host ops to the work they launched."""
